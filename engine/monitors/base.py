"""What every semantic monitor shares: the refusal record and the "is this character code" test.

A monitor is a character-level automaton driven alongside a copy of the lexer (:mod:`engine.lexing.automaton`):
it sees each character of a candidate token together with the lexer's bracket depth and whether the
character is code, and answers a :class:`Refusal` when the character breaks its rule. Monitors never
raise mid-generation: a refused token is just a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lexing import automaton as pylex
from ..lexing.automaton import Lex

# lexer modes in which the next character is not code (string body, comment, f-string spec, ...)
NOT_CODE = frozenset({pylex.STR, pylex.STR_OPEN1, pylex.COMMENT, pylex.FSPEC, pylex.FCONV, pylex.FCONV_DONE,
                      pylex.FSTR_RBRACE, pylex.FSTR_LBRACE, pylex.LINECONT})
# lexer modes in which the cursor is not in code: a string body, a comment, an f-string's literal
# part or format spec (a completion there is prose; no monitor applies)
PROSE_MODES = frozenset({pylex.COMMENT, pylex.STR, pylex.STR_OPEN1, pylex.FSTR_LBRACE, pylex.FSPEC})


def code_char(state: Lex, ch: str) -> bool:
    """True when ``ch`` fed to ``state`` is code (not string body, comment or format spec)."""
    m = state.mode
    if m in NOT_CODE:
        return False
    if m == pylex.STR_OPEN2:  # ``""`` then: a third quote opens a triple-quoted string
        return ch != state.q
    return True


def ident_char(ch: str) -> bool:
    return ch == "_" or ch.isalnum() or ch >= "\x80"


def leading_word(text: str) -> str:
    """The identifier characters at the start of ``text`` ("" if none): the end of a word a
    completion finishes."""
    k = 0
    while k < len(text) and ident_char(text[k]):
        k += 1
    return text[:k]


@dataclass
class Refusal:
    """Why a token was refused (for ``explain``)."""

    rule: str  # "required-slot" | "unknown-keyword" | "duplicate-keyword" | "positional-after-keyword" | ...
    detail: str
