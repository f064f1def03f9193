"""The constraint spec: everything one request's constrained decoding must obey, as one record.

:func:`constraint_spec` is built where the document, jedi and the workspace live (the LSP process or
the CLI): the lexer state at the cursor (indentation style, comment policy), the first-token rule's
inputs (healed space, cursor line), the shape and stop rules (single/multi-line, wrap, token budget,
stop token ids), the semantic monitors at their starting point (argument slots, member access or the
block-header rule, the names monitor) with the callee resolver's configuration (document path,
required-argument policy table), the domain vocabulary and the fuse's settings.
:func:`start_from_spec` turns it into the decoder's :class:`engine.decode_loop.Start` (FSM guide,
first-token rule, monitors) over a :class:`engine.fsm.TokenIndex`, wherever the model runs: the
in-process decode loop (:class:`engine.complete.Engine`) and the vLLM logits processor
(:mod:`fsm_complete.vllm`) both start from a spec, so a spec sent as JSON (:meth:`ConstraintSpec.to_json`,
:meth:`ConstraintSpec.from_json`) decodes exactly as the one built in process.

The monitors travel as their state (a tagged JSON codec of the registered monitor and lexer
classes, :func:`encode` / :func:`decode`), so the receiving side re-runs no jedi query for the
cursor; only calls that the completion itself opens are resolved where the model runs (jedi over
the prefix plus the completion so far, from its cache only; see :class:`ResolverSpec`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from .lexing.automaton import Lex
from .monitors.base import ident_char
from .monitors.block_header import BlockHeader
from .monitors.member import MemberAccess
from .monitors.names import NamesMonitor, _Bracket, _cursor_word
from .monitors.semantics import Semantics
from .monitors.slots import CallSlots
from .required_arguments import PolicyTable, RequiredKeyword
from .resolve.jedi_client import Param
from .signatures import CallSpec

SPEC_VERSION = 3  # bump when a field or a monitor's state changes meaning


class SpecError(ValueError):
    """A spec that cannot be read: malformed JSON, an unknown type tag or another spec version."""


# -- the codec ---------------------------------------------------------------------------------------

# the only classes a spec may carry (decoding builds nothing else)
_CLASSES = {cls.__name__: cls for cls in (Lex, CallSlots, MemberAccess, BlockHeader, NamesMonitor, _Bracket,
                                          CallSpec, Param, RequiredKeyword)}


def _slots(cls) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in getattr(klass, "__slots__", ()):
            if name not in names:
                names.append(name)
    return names


def encode(value):
    """A JSON-ready form of ``value``: plain JSON types as they are; tuples, sets, frozensets, bytes,
    non-string-keyed dicts and the registered classes as ``{"$kind": ...}`` objects. Raises
    :class:`SpecError` for anything else (a closure, an open file: it cannot travel)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        items = sorted((encode(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
        return {"$frozenset" if isinstance(value, frozenset) else "$set": items}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {"$dict": [[encode(k), encode(v)] for k, v in value.items()]}
    cls = type(value)
    if _CLASSES.get(cls.__name__) is cls:
        if dataclasses.is_dataclass(value):
            state = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        else:
            state = {name: encode(getattr(value, name)) for name in _slots(cls) if hasattr(value, name)}
        return {"$type": cls.__name__, "state": state}
    raise SpecError(f"a constraint spec cannot carry a {cls.__name__} ({value!r:.80})")


def decode(data):
    """The value :func:`encode` made ``data`` from. Raises :class:`SpecError` on an unknown tag."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise SpecError(f"malformed spec value {data!r:.80}")
    if "$tuple" in data:
        return tuple(decode(v) for v in data["$tuple"])
    if "$frozenset" in data:
        return frozenset(decode(v) for v in data["$frozenset"])
    if "$set" in data:
        return {decode(v) for v in data["$set"]}
    if "$bytes" in data:
        return bytes.fromhex(data["$bytes"])
    if "$dict" in data:
        return {decode(k): decode(v) for k, v in data["$dict"]}
    cls = _CLASSES.get(data.get("$type"))
    if cls is None or not isinstance(data.get("state"), dict):
        raise SpecError(f"unknown type in spec: {data.get('$type')!r}")
    state = {name: decode(v) for name, v in data["state"].items()}
    if dataclasses.is_dataclass(cls):
        return cls(**state)
    obj = cls.__new__(cls)
    allowed = set(_slots(cls))
    for name, v in state.items():
        if name not in allowed:
            raise SpecError(f"{cls.__name__} has no field {name!r}")
        setattr(obj, name, v)
    return obj


# -- the record --------------------------------------------------------------------------------------


@dataclass
class ResolverSpec:
    """How calls that the completion itself opens are resolved (argument slots for ``requests.get(``
    typed by the model): jedi over the document prefix plus the completion so far, with the file's
    ``path`` (imports of modules beside it; None: none) and the required-argument policy table
    (``profile`` and its ``rules`` by qualified callee name). Resolution happens where the model
    runs, so a server without the workspace on disk resolves fewer callees (policy rules hold)."""

    path: str | None
    profile: str
    rules: dict  # qualified name -> tuple[RequiredKeyword, ...]

    def policies(self) -> PolicyTable:
        return PolicyTable(self.rules, self.profile)


@dataclass
class ConstraintSpec:
    """One request's decoding constraints (see the module docstring). Positions are code points.

    ``lex``: the lexer at the cursor (after the healed space is given back; carries the
    ``code_only`` comment policy); ``style``: the file's indentation character (None: either);
    ``indent_unit``: one indentation level of the file (a tab or N spaces; "" no indentation rule,
    :class:`engine.step_mask.StepRules`). ``heal``: the end of the prefix handed back to the
    model (:func:`healed_text`: "", a space, or the half-typed word with the space before it). ``tail``: the end of the prefix (at least the cursor's line and 64 characters,
    for the first-token rule, the dedent stop and the domain boost). ``monitors``: the
    :class:`engine.monitors.semantics.Semantics` state at the cursor, encoded (None: no semantic
    monitor). ``stop_ids``: token ids that end the completion (the FIM template's and the
    tokenizer's EOS); ``stop_tokens``: the template's stop token strings (the receiving side builds
    the same vocabulary); ``vocab_digest``: :meth:`engine.vocab.Vocabulary.digest` of the sender's
    tokenizer (a server with another tokenizer refuses the spec). ``mode``/``policy``: the
    fingerprint's mode and its policy (informational). ``constrained`` False: an unconstrained
    request's spec (:func:`healing_spec`): only token healing's rules and the stop rules apply, so a
    remote backend heals as the in-process decoder does."""

    lex: Lex
    style: str | None
    heal: str
    tail: str
    multiline: bool
    wrap_ok: bool
    single_line: bool
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stop_ids: list
    stop_tokens: list
    vocab_digest: str = ""
    indent_unit: str = ""
    monitors: Semantics | None = None
    resolver: ResolverSpec | None = None
    domain_vocabulary: list = field(default_factory=list)
    domain_boost: float = 1.5
    fuse_threshold: float = 0.02
    fuse_bias: float = 2.0
    mode: str | None = None
    policy: dict | None = None
    constrained: bool = True
    version: int = SPEC_VERSION

    @property
    def cursor_line(self) -> str:
        """The cursor's line before the cursor (the healed space included)."""
        return self.tail[self.tail.rfind("\n") + 1:]

    def as_dict(self) -> dict:
        """The JSON-ready form (``SamplingParams.extra_args["fsm_spec"]``, ``vllm_xargs``)."""
        sem = self.monitors
        monitors = None
        if sem is not None:
            monitors = {"calls": encode(list(sem.calls)), "member": encode(sem.member), "source": sem.source,
                        "suffix_closes": sem.suffix_closes, "names": encode(sem.names)}
        resolver = None
        if self.resolver is not None:
            resolver = {"path": self.resolver.path, "profile": self.resolver.profile,
                        "rules": encode(self.resolver.rules)}
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("lex", "monitors", "resolver", "policy")}
        out.update(lex=encode(self.lex), monitors=monitors, resolver=resolver, policy=self.policy)
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> ConstraintSpec:
        """Raises :class:`SpecError` on another :data:`SPEC_VERSION` or a malformed record."""
        if not isinstance(data, dict):
            raise SpecError("a constraint spec is a JSON object")
        if data.get("version") != SPEC_VERSION:
            raise SpecError(f"constraint spec version {data.get('version')!r}; this side reads {SPEC_VERSION} "
                            "(run the same fsm-complete version on both sides)")
        try:
            fields = {f.name for f in dataclasses.fields(cls)}
            kw = {k: v for k, v in data.items() if k in fields}
            kw["lex"] = decode(data["lex"])
            m = data.get("monitors")
            if m is not None:
                kw["monitors"] = Semantics(calls=decode(m["calls"]), member=decode(m["member"]), source=m["source"],
                                           suffix_closes=m["suffix_closes"], names=decode(m["names"]))
            r = data.get("resolver")
            if r is not None:
                kw["resolver"] = ResolverSpec(r["path"], r["profile"], decode(r["rules"]))
            spec = cls(**kw)
        except SpecError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SpecError(f"malformed constraint spec: {exc}") from exc
        if not isinstance(spec.lex, Lex):
            raise SpecError("malformed constraint spec: lex is no lexer state")
        return spec

    @classmethod
    def from_json(cls, text: str | bytes) -> ConstraintSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"constraint spec is not JSON: {exc}") from exc
        return cls.from_dict(data)


# -- building it (where the document lives) ---------------------------------------------------------


def healed_space(prefix: str, cursor_line: str) -> str:
    """The space token healing gives back to the model (Lundberg's token healing, guidance): BPE
    vocabularies carry a space at the start of the next word, so a prompt ending in it is one the
    model has rarely seen. ``" "`` when ``prefix`` ends with exactly one space after text on the
    cursor's line, or when the cursor's line is an indentation of spaces (byte-level BPE reads
    ``"\\n    return"`` as ``"\\n   "`` + ``" return"``: a prompt ending in all four spaces
    makes the model expect a blank line); else ``""``. The first token must then start with it
    (:meth:`engine.step_mask.StepMask.first_token_rule`)."""
    if cursor_line and not cursor_line.strip(" "):
        return " "
    return " " if cursor_line.strip() and prefix.endswith(" ") and not prefix.endswith("  ") else ""


MAX_HEALED_WORD = 48  # characters; a longer word at the cursor is not given back


def healed_text(prefix: str, cursor_line: str, suffix: str = "") -> str:
    """The end of ``prefix`` token healing gives back to the model: the half-typed word at the
    cursor with the single space before it (``print(resul`` -> ``"resul"``, ``x = resul`` ->
    ``" resul"``: BPE reads ``result`` as one token that the prompt's ``res`` + ``ul`` cuts in
    two, so the model, trained on whole words, rarely continues it), else the space of
    :func:`healed_space`. The decoded text must then start with it, over as many tokens as the
    model needs (:meth:`engine.step_mask.StepMask.heal_rule`), and it is removed afterwards (it is
    the user's). No word is given back when word characters follow the cursor (``res|ult``: the
    model would write the word twice) or when it is longer than :data:`MAX_HEALED_WORD`."""
    word = _cursor_word(prefix)
    if not word or len(word) > MAX_HEALED_WORD or (suffix[:1] and ident_char(suffix[0])):
        return healed_space(prefix, cursor_line)
    before = prefix[: len(prefix) - len(word)]
    return healed_space(before, cursor_line[: len(cursor_line) - len(word)]) + word


__all__ = ["SPEC_VERSION", "ConstraintSpec", "ResolverSpec", "SpecError", "decode", "encode", "healed_space",
           "healed_text"]
