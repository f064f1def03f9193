"""Semantic monitors: character-level automata that run beside the lexical FSM during decoding.

The lexical automaton (:mod:`engine.lexing.automaton`, :mod:`engine.fsm`) decides which tokens keep the code
*lexically* valid; the monitors decide which of those keep it *semantically* plausible:

* :mod:`.slots` — argument slots of a call (required arguments, keyword names, positional count);
* :mod:`.member` — member access after ``name.`` (the attribute must exist);
* :mod:`.block_header` — a line the indentation after it says must open a block;
* :mod:`.names` — names must exist (a load is bound somewhere; new names only where they bind);
* :mod:`.semantics` — :class:`Semantics`, the monitors of one request driven together;
* :mod:`.setup` — which monitors a request at a cursor gets (callee resolution, member names);
* :mod:`.filter` — the decoder's use of them: the per-step semantic filter over candidate tokens,
  the fuse's choice and the safe continuation that closes open calls.

Monitors never raise mid-generation: a refused token is a :class:`Refusal`.
"""

from .base import Refusal, code_char
from .block_header import HEADER_KEYWORDS, BlockHeader, block_header_at
from .member import MemberAccess
from .names import NamesMonitor, document_names, names_monitor
from .semantics import Semantics
from .slots import CallSlots, call_slots_at

__all__ = [
    "HEADER_KEYWORDS",
    "BlockHeader",
    "CallSlots",
    "MemberAccess",
    "NamesMonitor",
    "Refusal",
    "Semantics",
    "block_header_at",
    "call_slots_at",
    "code_char",
    "document_names",
    "names_monitor",
]
