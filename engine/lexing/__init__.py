"""One home for lexing Python: what a newcomer teaching the lexer a new string prefix touches.

* :mod:`~engine.lexing.vocabulary` - the lexical vocabulary, spelled once: string prefixes (incl.
  PEP 750 ``t``), brackets, keyword classes, the indentation width rule.
* :mod:`~engine.lexing.automaton` - the *strict* character automaton: accepts exactly the prefixes
  of lexically valid Python (the token mask's ground truth).
* :mod:`~engine.lexing.prefix` - the incremental prefix lexer (the automaton's state after a
  document prefix, relexing only what typing changed).
* :mod:`~engine.lexing.scanner` - the *tolerant* context scanner for half-typed code: code /
  string / comment / f-string field / format spec at the cursor, open brackets; never raises.
* :mod:`~engine.lexing.context` - the cursor's context as an editor needs it, and the rule that
  keeps a completion inside the comment or string it is typed in.
* :mod:`~engine.lexing.calls` - the call and callee at the cursor, from a scan.

The strict and the tolerant lexer answer the same on valid code (``tests/test_lexing.py``).
"""

from .automaton import Complex, Lex, Reject, lex_text
from .calls import callee_before, enclosing_call, paren_kind
from .context import CODE, COMMENT, STRING, Context, clip_to_context, context_of, cursor_context
from .prefix import PrefixLexer
from .scanner import Scan, scan
from .vocabulary import indent_width

__all__ = [
    "CODE", "COMMENT", "STRING", "Complex", "Context", "Lex", "PrefixLexer", "Reject", "Scan", "callee_before",
    "clip_to_context", "context_of", "cursor_context", "enclosing_call", "indent_width", "lex_text", "paren_kind",
    "scan",
]
