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
