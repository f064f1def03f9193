"""The lexical vocabulary of Python, spelled once: string prefixes, brackets, keyword classes and the
indentation width rule. The strict automaton (:mod:`engine.lexing.automaton`), the tolerant scanner
(:mod:`engine.lexing.scanner`), the call finder (:mod:`engine.lexing.calls`) and the semantic
monitors read them from here.

Sources: Python Language Reference 2.4.1 "String and Bytes literals" (prefixes), PEP 701 (f-strings),
PEP 750 (``t``-strings, Python 3.14: template strings lex exactly like f-strings), 2.3.1 "Keywords",
8 "Compound statements", 2.1.8 "Indentation".
"""

from __future__ import annotations

import keyword
import re
from collections import Counter

# every valid string prefix, lower-cased (2.4.1 + PEP 750); "u" combines with nothing
STRING_PREFIXES = frozenset({"r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"})
PREFIX_LETTERS = frozenset("rubft")  # letters of a prefix, lower-cased
PREFIX_CHARS = frozenset("rRuUbBfFtT")  # the same, as typed
# prefixes whose strings hold ``{...}`` replacement fields (f-strings, PEP 750 template strings)
FIELD_PREFIX_LETTERS = frozenset("ft")

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSER_TO_OPENER = {")": "(", "]": "[", "}": "{"}

KEYWORDS = frozenset(keyword.kwlist)  # hard keywords
SOFT_KEYWORDS = frozenset(keyword.softkwlist)  # match, case, type, _
# first words of a compound statement's header (Language Reference 8); "async" before def/for/with
COMPOUND_KEYWORDS = ("async", "case", "class", "def", "elif", "else", "except", "finally", "for", "if", "match",
                     "try", "while", "with")
# keywords that can only begin a statement: a line inside open brackets that starts with one was
# left by broken code (the tolerant scanner closes those brackets there)
STATEMENT_ONLY_KEYWORDS = ("def", "class", "return", "import", "with", "while", "try", "except", "raise", "pass",
                           "del", "global", "nonlocal", "assert", "break", "continue", "elif", "finally")
# words before a ``(`` that opens an expression (or a parameter list), not a call; None/True/False
# are values (calling them is a run-time error, not a lexical one); soft keywords may be names
NOT_CALLEES = KEYWORDS - {"None", "True", "False"}
# keywords that may follow a number directly (``1if x else y``; CPython warns but accepts)
NUMBER_KEYWORDS = ("and", "as", "assert", "async", "await", "else", "for", "from", "if", "in", "is", "not", "or")


def indent_width(ws: str) -> int:
    """Column width of leading whitespace; a tab advances to the next multiple of 8 and a form feed
    resets the column (CPython's tokenizer, Language Reference 2.1.8)."""
    col = 0
    for ch in ws:
        if ch == "\t":
            col = (col // 8 + 1) * 8
        elif ch == "\f":
            col = 0
        else:
            col += 1
    return col


# a line ending in ":" (a block header; a trailing comment allowed) and the next code line's indentation
_HEADER_AND_BODY = re.compile(r"^([ ]*)[^ \t\n#][^\n]*:[ \t]*(?:#[^\n]*)?\n(?:[ \t]*(?:#[^\n]*)?\n)*([ ]*)[^ \t\n#]", re.M)
_UNIT_WINDOW = 16_000  # code points before the cursor (and a quarter of it after) read for the unit


def indent_step(doc: str, cursor: int) -> int:
    """The file's indentation unit in spaces: the most common step (1 to 8 columns) from a block
    header (a line ending in ``:``) to the first line of its body, among space-indented lines near
    ``cursor`` (a code-point offset); 4 when there is none (PEP 8: 4 spaces per indentation level).
    Tab-indented lines are skipped (their unit is a tab)."""
    steps: Counter = Counter()
    for header, body in _HEADER_AND_BODY.findall(doc, max(0, cursor - _UNIT_WINDOW), cursor + _UNIT_WINDOW // 4):
        step = len(body) - len(header)
        if 0 < step <= 8:
            steps[step] += 1
    return steps.most_common(1)[0][0] if steps else 4


def indent_unit(doc: str, cursor: int, style: str | None) -> str:
    """The text of one indentation level in this file: a tab when ``style`` (the file's indentation
    character, :func:`engine.fsm.detect_indent_style`) is a tab, else :func:`indent_step` spaces."""
    return "\t" if style == "\t" else " " * indent_step(doc, cursor)
