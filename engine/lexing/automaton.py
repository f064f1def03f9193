"""Character-level automaton for Python's lexical rules and indentation (the FSM's ground truth).

The automaton accepts exactly the *prefixes* of lexically valid Python source: names, numbers
(PEP 515 underscores, the Language Reference "Integer/Floating-point/Imaginary literals"), every
string form (quotes, triple quotes, r/b/f/u/t prefixes, escapes, f-string and PEP 750 t-string
replacement fields with conversions and format specs, PEP 701 nesting), comments, operators, brackets matched by type,
backslash continuations, and indentation (Language Reference 2.1.8: after a logical line ending in
a block opener ``:`` the next logical line is indented deeper; a dedent must return to an
enclosing level; no indentation rules inside brackets or after a backslash continuation).

It is deliberately permissive where CPython is permissive at the lexical level (unknown escape
sequences, keywords used as names, ``x.5``): it must never reject real code (soundness), and the
grammar itself is checked afterwards by tree-sitter and ``compile()``.

:class:`Lex` is mutable during one simulation and copied per token. In *abstract* mode (used to
build the per-state token tables) the bracket stack may start with :data:`UNK` (unknown frames
below) and the indentation stack is unknown; operations that need the unknown part either record a
requirement in ``reqs`` (a pop below the known top, one indentation check) or raise
:class:`Complex`, meaning "decide this token at run time by exact simulation".
"""

from __future__ import annotations

import re

from .vocabulary import (  # noqa: F401 - re-exported: the automaton's historical names
    CLOSER_TO_OPENER,
    FIELD_PREFIX_LETTERS,
    NUMBER_KEYWORDS,
    OPENERS,
    PREFIX_LETTERS,
    STRING_PREFIXES,
    indent_width,
)

_PREFIX_PARTS = PREFIX_LETTERS
# modes
CODE, NAME, DOT, NUM_INT, NUM_US, NUM_ZERO, NUM_ZERO_US, NUM_ZD, NUM_ZD_US, NUM_PFX, NUM_PFX_D, NUM_PFX_US = range(12)
NUM_FRAC, NUM_FRAC_D, NUM_FRAC_US, NUM_EXP, NUM_EXP_SIGN, NUM_EXP_D, NUM_EXP_US, NUM_END = range(12, 20)
STR, STR_OPEN1, STR_OPEN2, COMMENT, BANG, LINECONT = range(20, 26)
FSTR_LBRACE, FSTR_RBRACE, FCONV, FCONV_DONE, FSPEC, DOT2, DOT_WS = range(26, 33)

MODE_NAMES = {v: k for k, v in list(globals().items()) if isinstance(v, int) and k.isupper()}

UNK = "?"  # bottom marker of an abstract bracket stack: unknown frames (possibly none) below
ABSTRACT = "A"  # indentation stack not known (table building)
CHECKED = "C"  # abstract indentation stack after one recorded check
UNKNOWN_WS = "\x01"  # abstract: indentation typed before the token (unknown) precedes ws[1:]

OPERATOR_CHARS = frozenset("+-*/%&|^~<>=,;@")
# characters that cannot begin a logical line (Language Reference 7/8: statements begin with an
# expression, a keyword, a decorator, a starred target or a unary operator)
NOT_STATEMENT_START = frozenset(":,=)]}/%&|^<>!;")
HEX = frozenset("0123456789abcdefABCDEF")
OCT = frozenset("01234567")
BIN = frozenset("01")
DIGITS = frozenset("0123456789")

# Number literals (Language Reference "Integer/Floating-point/Imaginary literals", PEP 515
# underscores) as a transition table: mode -> ((character class, next mode), ...), end rule.
# The end rule applies to a character that no class holds: _ENDS (the number ends before it, unless
# a name is glued on), _ENDS_BEFORE_NON_DIGIT (a radix literal ends; a stray digit or letter is an
# error), or the message of the Reject it raises.
RADIX_DIGITS = frozenset()  # placeholder class: the digits of the radix in ``Lex.sp`` (x, o or b)
_RADIX = {"x": HEX, "o": OCT, "b": BIN}
_ENDS = object()
_ENDS_BEFORE_NON_DIGIT = object()
_EXP_OR_IMAG = (("eE", NUM_EXP), ("jJ", NUM_END))
NUMBER_STEPS = {
    NUM_INT: (((DIGITS, NUM_INT), ("_", NUM_US), (".", NUM_FRAC)) + _EXP_OR_IMAG, _ENDS),
    NUM_ZERO: ((("0", NUM_ZERO), (DIGITS, NUM_ZD), ("_", NUM_ZERO_US), ("xXoObB", NUM_PFX),
                (".", NUM_FRAC)) + _EXP_OR_IMAG, _ENDS),
    # zeros, then another digit: a digit part (``01.5``, ``0_1e3``, ``01j``), never an integer
    NUM_ZD: (((DIGITS, NUM_ZD), ("_", NUM_ZD_US), (".", NUM_FRAC)) + _EXP_OR_IMAG,
             "leading zeros in decimal integer literals are not permitted"),
    NUM_US: (((DIGITS, NUM_INT),), "invalid decimal literal"),
    # ``"0"+ (["_"] "0")*`` is an integer (``0_0``, ``0_000_000``: Language Reference, Integer literals)
    NUM_ZERO_US: ((("0", NUM_ZERO), (DIGITS, NUM_ZD)), "invalid decimal literal"),
    NUM_ZD_US: (((DIGITS, NUM_ZD),), "invalid decimal literal"),
    NUM_FRAC_US: (((DIGITS, NUM_FRAC_D),), "invalid decimal literal"),
    NUM_EXP_US: (((DIGITS, NUM_EXP_D),), "invalid decimal literal"),
    NUM_PFX: (((RADIX_DIGITS, NUM_PFX_D), ("_", NUM_PFX_US)), "invalid number literal"),
    NUM_PFX_US: (((RADIX_DIGITS, NUM_PFX_D),), "invalid number literal"),
    NUM_PFX_D: (((RADIX_DIGITS, NUM_PFX_D), ("_", NUM_PFX_US)), _ENDS_BEFORE_NON_DIGIT),
    NUM_FRAC: (((DIGITS, NUM_FRAC_D),) + _EXP_OR_IMAG, _ENDS),
    NUM_FRAC_D: (((DIGITS, NUM_FRAC_D), ("_", NUM_FRAC_US)) + _EXP_OR_IMAG, _ENDS),
    NUM_EXP: ((("+-", NUM_EXP_SIGN), (DIGITS, NUM_EXP_D)), "invalid float literal"),
    NUM_EXP_SIGN: (((DIGITS, NUM_EXP_D),), "invalid float literal"),
    NUM_EXP_D: (((DIGITS, NUM_EXP_D), ("_", NUM_EXP_US), ("jJ", NUM_END)), _ENDS),
    NUM_END: ((), _ENDS),
}

# modes in which the lexer may stop (the buffer so far ends at a token boundary or inside a string,
# comment or name); the others need more characters to form a valid token
STOPPABLE = frozenset(
    {CODE, NAME, DOT, NUM_INT, NUM_ZERO, NUM_PFX_D, NUM_FRAC, NUM_FRAC_D, NUM_EXP_D, NUM_END, STR, STR_OPEN1,
     STR_OPEN2, COMMENT, FSPEC}
)


class Reject(Exception):
    """The character cannot follow the buffer (lexically invalid Python)."""


class Complex(Exception):
    """Abstract simulation needs stack or indentation facts it does not have."""


def _name_start(ch: str) -> bool:
    return ch.isalpha() or ch == "_" if ch < "\x80" else ch.isidentifier()


def _name_continue(ch: str) -> bool:
    return ch.isalnum() or ch == "_" if ch < "\x80" else ("a" + ch).isidentifier()


class Lex:
    """State of the automaton after a buffer prefix.

    Attributes (all immutable values, so a shallow copy is a snapshot):
    ``mode`` one of the mode constants; ``sp`` string-prefix candidate in NAME mode;
    ``q, tri, raw, byt, fs`` the current string's quote, triple, raw, bytes and f flags; ``qn`` closing
    quotes seen in a triple-quoted string; ``esc`` after a backslash in a string; ``brackets`` tuple
    of frames (``(``, ``[``, ``{``, or ``("f", q, tri, raw)`` for an f-string replacement field,
    ``("s", q, tri, raw)`` for a field nested in a format spec); ``ls`` at a logical line start and
    ``ws`` the indentation typed so far on it; ``opener`` the logical line so far ends in ``:``;
    ``need_indent`` the next logical line must be indented deeper; ``indents`` tuple of enclosing
    indentation widths (None: lenient, anything goes); ``cr`` the last character was ``\\r``;
    ``pend`` bytes of an incomplete UTF-8 character; ``style`` the file's indentation character
    (``" "``, ``"\\t"`` or None for either); ``code_only`` a policy flag that masks comments;
    ``reqs`` recorded requirements (abstract mode only).
    """

    __slots__ = ("mode", "sp", "q", "tri", "raw", "byt", "fs", "qn", "esc", "brackets", "ls", "ws", "opener",
                 "need_indent", "indents", "cr", "pend", "style", "code_only", "reqs")

    def __init__(self, style: str | None = None):
        self.mode = CODE
        self.sp = None
        self.q = ""
        self.tri = self.raw = self.byt = self.fs = False
        self.qn = 0
        self.esc = False
        self.brackets: tuple = ()
        self.ls = True
        self.ws: str | None = ""
        self.opener = False
        self.need_indent = False
        self.indents = (0,)
        self.cr = False
        self.pend = b""
        self.style = style
        self.code_only = False
        self.reqs: list | None = None

    def copy(self) -> "Lex":
        new = Lex.__new__(Lex)
        for name in Lex.__slots__:
            setattr(new, name, getattr(self, name))
        return new

    def key(self) -> tuple:
        """Hashable full state (everything that decides future acceptance)."""
        return (self.mode, self.sp, self.q, self.tri, self.raw, self.byt, self.fs, self.qn, self.esc, self.brackets,
                self.ls, self.ws, self.opener, self.need_indent, self.indents, self.cr, self.pend, self.style,
                self.code_only)

    def core(self) -> "Lex":
        """Abstract copy: at most two known bracket frames over :data:`UNK`, unknown indentation."""
        new = self.copy()
        if len(self.brackets) > 2:
            new.brackets = (UNK,) + self.brackets[-2:]
        new.indents = ABSTRACT
        if self.ls:
            new.ws = UNKNOWN_WS
        new.style = None
        new.reqs = []
        return new

    def core_key(self) -> tuple:
        b = self.brackets if len(self.brackets) <= 2 else (UNK,) + self.brackets[-2:]
        return (self.mode, self.sp, self.q, self.tri, self.raw, self.byt, self.fs, self.qn, self.esc, b,
                self.ls, None if self.ls else self.ws, self.opener, self.need_indent, self.cr, self.pend, self.code_only)

    def describe(self) -> str:
        return f"{MODE_NAMES.get(self.mode, self.mode)} brackets={''.join(str(b[0]) for b in self.brackets)!r}"

    # ------------------------------------------------------------------------------------------
    # feeding

    def _run_end(self, data, i: int, as_bytes: bool) -> int:
        """End of the run starting at ``i`` that cannot change the state (the rest of a name, a
        comment's text, a string's plain characters); ``i`` when there is none. Only a speed-up."""
        if self.cr or self.pend:
            return i
        m = self.mode
        if m == NAME:
            if self.sp is not None:
                return i
            pat = _IDENT_RUN_B if as_bytes else _IDENT_RUN_S
        elif m == COMMENT:
            pat = _COMMENT_RUN_B if as_bytes else _COMMENT_RUN_S
        elif m == STR and not self.esc:
            pat = _string_run(self.q, self.fs, self.byt, as_bytes)
        else:
            return i
        end = pat.match(data, i).end()
        if end > i and m == STR:
            self.qn = 0
        return end

    def feed_bytes(self, data: bytes) -> None:
        """Consume UTF-8 bytes (possibly an incomplete character at either end). Raises :class:`Reject`."""
        i, n = 0, len(data)
        while i < n:
            j = self._run_end(data, i, True)
            if j > i:
                i = j
                continue
            b = data[i]
            i += 1
            pend = self.pend
            if pend:
                if b & 0xC0 != 0x80:
                    raise Reject("invalid UTF-8")
                pend += bytes((b,))
                need = 2 if pend[0] < 0xE0 else 3 if pend[0] < 0xF0 else 4
                if len(pend) == need:
                    try:
                        ch = pend.decode("utf-8")
                    except UnicodeDecodeError:
                        raise Reject("invalid UTF-8") from None
                    self.pend = b""
                    self.feed_char(ch)
                else:
                    self.pend = pend
            elif b < 0x80:
                self.feed_char(chr(b))
            elif 0xC2 <= b <= 0xF4:
                self._check_non_ascii_allowed()
                self.pend = bytes((b,))
            else:
                raise Reject("invalid UTF-8")

    def feed_text(self, text: str) -> None:
        """Consume text. Raises :class:`Reject` (with the offending offset in ``args[1]``)."""
        if self.pend:
            raise Reject("incomplete UTF-8 character before text", 0)
        i, n = 0, len(text)
        while i < n:
            j = self._run_end(text, i, False)
            if j > i:
                i = j
                continue
            try:
                self.feed_char(text[i])
            except Reject as exc:
                raise Reject(exc.args[0] if exc.args else "invalid", i) from None
            i += 1

    def _check_non_ascii_allowed(self) -> None:
        m = self.mode
        if m in (STR, STR_OPEN1, STR_OPEN2, FSTR_LBRACE, FSTR_RBRACE, FSPEC):
            if self.byt and m in (STR, STR_OPEN1):
                raise Reject("bytes can only contain ASCII literal characters")
            return
        if m in (COMMENT, CODE, NAME):
            return
        if m == STR_OPEN2 or m == DOT or m == DOT2 or m == DOT_WS:
            return
        raise Reject("non-ASCII character here")

    # ------------------------------------------------------------------------------------------
    # the automaton

    def feed_char(self, ch: str) -> None:
        """Consume one character. Raises :class:`Reject` (invalid) or :class:`Complex` (abstract mode)."""
        if self.cr:
            self.cr = False
            if ch == "\n":
                return
        if ch == "\x00":
            raise Reject("source code cannot contain null bytes")
        m = self.mode
        if m == STR:
            self._string_char(ch)
            return
        if m == COMMENT:
            if ch == "\n" or ch == "\r":
                self.mode = CODE
                self._newline(ch)
            return
        if m == NAME:
            self._name_char(ch)
            return
        if m >= NUM_INT and m <= NUM_END:
            if self._number_char(ch):
                return
            self.mode = CODE
            self.sp = None
            self._code_char(ch)
            return
        if m == CODE:
            self._code_char(ch)
            return
        if m == STR_OPEN1:
            if ch == self.q:
                self.mode = STR_OPEN2
                return
            self.mode = STR
            self._string_char(ch)
            return
        if m == STR_OPEN2:
            if ch == self.q:
                self.mode = STR
                self.tri = True
                self.qn = 0
                return
            self._end_string()
            self.feed_char(ch)
            return
        if m == DOT or m == DOT2 or m == DOT_WS:
            self._after_dot(ch)
            return
        if m == LINECONT:
            if ch == "\n" or ch == "\r":
                self.mode = CODE
                self.cr = ch == "\r"
                return
            raise Reject("unexpected character after line continuation character")
        if m == BANG:
            if ch == "=":
                self.mode = CODE
                return
            raise Reject("'!' must be followed by '='")
        self._field_char(m, ch)

    def _name_char(self, ch: str) -> None:
        """A character after a name: the name goes on, a string prefix opens its string, or code."""
        if _name_continue(ch):
            sp = self.sp
            if sp is not None and sp[0] == "#":  # a keyword glued to a number: ``1if``
                if not any(k.startswith(sp[1:] + ch) for k in NUMBER_KEYWORDS):
                    raise Reject("invalid decimal literal")
                self.sp = sp + ch
                return
            if sp is not None:
                low = ch.lower()
                cand = sp + low
                self.sp = cand if low in _PREFIX_PARTS and len(cand) <= 2 and (
                    cand in STRING_PREFIXES or len(cand) == 1) else None
            return
        if (ch == '"' or ch == "'") and self.sp in STRING_PREFIXES:
            sp = self.sp
            self._open_string(ch, raw="r" in sp, byt="b" in sp, fs=not FIELD_PREFIX_LETTERS.isdisjoint(sp))
            return
        if self.sp is not None and self.sp[0] == "#" and self.sp[1:] not in NUMBER_KEYWORDS:
            raise Reject("invalid decimal literal")
        self.mode = CODE
        self.sp = None
        self._code_char(ch)

    def _field_char(self, m: int, ch: str) -> None:
        """A character in the f-/t-string field modes: a brace pair, a conversion, a format spec."""
        if m == FSTR_LBRACE:
            if ch == "{":
                self.mode = STR
                return
            self._push(("f", self.q, self.tri, self.raw))
            self.mode = CODE
            self._code_char(ch)
            return
        if m == FSTR_RBRACE:
            if ch == "}":
                self.mode = STR
                return
            raise Reject("f-string: single '}' is not allowed")
        if m == FCONV:
            if ch == "=":  # ``!=`` inside a replacement field
                self.mode = CODE
                return
            if ch in "rsa":
                self.mode = FCONV_DONE
                return
            raise Reject("f-string: invalid conversion character")
        if m == FCONV_DONE:
            if ch == ":":
                self.mode = FSPEC
                self.qn = 0
                return
            if ch == "}":
                self._close_field()
                return
            raise Reject("f-string: expecting '}'")
        if m == FSPEC:
            # PEP 701: a format spec is literal text up to the field's '}'; '{' opens a nested field
            # ('{{' is no escape here), the string's own quote ends the string (the field is then
            # unterminated: CPython "expecting '}'"), a newline is allowed only in triple quotes
            if ch == "{":
                self._push(("s", self.q, self.tri, self.raw))
                self.mode = CODE
                return
            if ch == "}":
                self._close_field()
                return
            frame = self._top()
            if ch == frame[1]:
                if not frame[2]:
                    raise Reject("f-string: expecting '}' (the quote ends the string inside a format spec)")
                self.qn += 1
                if self.qn == 3:
                    raise Reject("f-string: expecting '}' (the quotes end the string inside a format spec)")
                return
            self.qn = 0
            if (ch == "\n" or ch == "\r") and not frame[2]:
                raise Reject("f-string: newline in the format spec of a single-quoted f-string")
            if ch == "\r":
                self.cr = True
            return
        raise AssertionError(f"unknown mode {m}")

    # -- code ------------------------------------------------------------------------------------

    def _code_char(self, ch: str) -> None:
        if ch == " " or ch == "\t" or ch == "\f":
            if self.ls:  # (ls implies an empty bracket stack)
                if ch != "\f":
                    if self.reqs is not None:
                        if ("style", ch) not in self.reqs:
                            self.reqs.append(("style", ch))
                    elif self.style is not None and ch != self.style:
                        raise Reject("indentation uses the other character (tabs vs spaces)")
                self.ws += ch
            return
        if ch == "\n" or ch == "\r":
            self.cr = ch == "\r"
            self._newline(ch)
            return
        if ch == "#":
            if self.code_only:
                raise Reject("comments are masked in code-only mode (policy)")
            self.mode = COMMENT
            return
        if ch == "\\":
            self._significant(ch)
            self.mode = LINECONT
            return
        self._significant(ch)
        if _name_start(ch):
            self.mode = NAME
            low = ch.lower()
            self.sp = low if low in _PREFIX_PARTS else None
            return
        if ch in DIGITS:
            self.mode = NUM_ZERO if ch == "0" else NUM_INT
            return
        if ch == '"' or ch == "'":
            self._open_string(ch, raw=False, byt=False, fs=False)
            return
        if ch in OPENERS:
            self._push(ch)
            return
        if ch in CLOSER_TO_OPENER:
            self._close(ch)
            return
        if ch == ".":
            self.mode = DOT
            return
        if ch == ":":
            top = self._top()
            if top is not None and top[0] in "fs" and len(top) == 4:
                self.mode = FSPEC
                self.qn = 0
                return
            return
        if ch == "!":
            top = self._top()
            if top is not None and top[0] in "fs" and len(top) == 4:
                self.mode = FCONV
                return
            self.mode = BANG
            return
        if ch in OPERATOR_CHARS:
            return
        raise Reject(f"invalid character {ch!r} in code")

    def _top(self):
        """Top bracket frame (None when empty). Raises Complex when only UNK is known."""
        b = self.brackets
        if not b:
            return None
        top = b[-1]
        if top == UNK:
            raise Complex("top frame unknown")
        return top

    def _significant(self, ch: str) -> None:
        """A significant character at the current bracket depth: indentation check + opener flag."""
        b = self.brackets
        if b and b[-1] == UNK:
            raise Complex("depth unknown: the opener flag may change")
        if not b:
            if self.ls:
                if ch in NOT_STATEMENT_START:
                    raise Reject(f"invalid syntax: a statement cannot start with {ch!r}")
                self._check_indent()
            self.opener = ch == ":"

    def _check_indent(self) -> None:
        ws = self.ws
        indents = self.indents
        if indents == ABSTRACT or indents == CHECKED:
            if indents == CHECKED:
                raise Complex("second indentation check in one token")
            from_cur = ws.startswith(UNKNOWN_WS)
            self.reqs.append(("indent", from_cur, ws[1:] if from_cur else ws, self.need_indent))
            self.indents = CHECKED
        elif indents is not None:
            width = indent_width(ws)
            top = indents[-1]
            if self.need_indent:
                if width <= top:
                    raise Reject("expected an indented block")
                self.indents = indents + (width,)
            elif width > top:
                raise Reject("unexpected indent")
            elif width < top:
                i = len(indents) - 1
                while i >= 0 and indents[i] > width:
                    i -= 1
                if i < 0 or indents[i] != width:
                    raise Reject("unindent does not match any outer indentation level")
                self.indents = indents[: i + 1]
        self.ls = False
        self.need_indent = False
        self.ws = ""

    def _newline(self, ch: str) -> None:
        b = self.brackets
        if b:
            if b[-1] == UNK:
                raise Complex("newline at unknown depth")
            return  # implicit line joining inside brackets
        if not self.ls:
            self.need_indent = self.opener
            self.opener = False
        self.ls = True
        self.ws = ""  # a fresh line: its indentation is typed inside this token from here on

    def _push(self, frame) -> None:
        self.brackets = self.brackets + (frame,)

    def _close(self, ch: str) -> None:
        b = self.brackets
        want = CLOSER_TO_OPENER[ch]
        if not b:
            raise Reject(f"unmatched {ch!r}")
        top = b[-1]
        if top == UNK:
            if ch == "}":
                raise Complex("'}' below the known stack")
            self.reqs.append(("pop", want))
            return
        if isinstance(top, tuple):
            if ch == "}":
                self._close_field()
                return
            raise Reject(f"f-string: closing parenthesis {ch!r} does not match '{{'")
        if top != want:
            raise Reject(f"closing parenthesis {ch!r} does not match {top!r}")
        self.brackets = b[:-1]

    def _close_field(self) -> None:
        b = self.brackets
        frame = b[-1]
        if frame == UNK:
            raise Complex("replacement field frame unknown")
        self.brackets = b[:-1]
        if frame[0] == "s":
            self.mode = FSPEC
            self.qn = 0
            return
        _, self.q, self.tri, self.raw = frame
        self.mode = STR
        self.fs = True
        self.byt = False
        self.qn = 0
        self.esc = False

    def _after_dot(self, ch: str) -> None:
        """After an attribute ``.`` (Language Reference 6.3.1) only a name may follow, possibly after
        whitespace (and newlines or comments inside brackets); ``...`` is the Ellipsis literal."""
        m = self.mode
        if ch == ".":
            self.mode = DOT2 if m == DOT else CODE if m == DOT2 else DOT
            return
        if ch in DIGITS and m != DOT_WS:  # ``.5``; ``x..5`` is an attribute dot then ``.5``
            self.mode = NUM_FRAC_D
            return
        if ch == " " or ch == "\t" or ch == "\f":
            self.mode = DOT_WS
            return
        if ch == "\\":
            self.mode = LINECONT
            return
        if ch == "\n" or ch == "\r" or ch == "#":
            b = self.brackets
            if b and b[-1] == UNK:
                raise Complex("depth unknown after '.'")
            if not b:
                raise Reject("invalid syntax: expected a name after '.'")
            if ch == "#":
                if self.code_only:
                    raise Reject("comments are masked in code-only mode (policy)")
                self.mode = COMMENT
            else:
                self.mode = DOT_WS
                self.cr = ch == "\r"
            return
        if _name_start(ch):
            self.mode = CODE
            self._code_char(ch)
            return
        raise Reject("invalid syntax: expected a name after '.'")

    # -- numbers ----------------------------------------------------------------------------------

    def _number_char(self, ch: str) -> bool:
        """True when ``ch`` continues the number; False when the number ended before ``ch``.

        One row of :data:`NUMBER_STEPS` per mode: the first character class that holds ``ch`` gives
        the next mode; otherwise the row's end rule applies (see :data:`NUMBER_STEPS`)."""
        steps, end = NUMBER_STEPS[self.mode]
        for chars, nxt in steps:
            if chars is RADIX_DIGITS:
                chars = _RADIX[self.sp]
            if ch in chars:
                if nxt == NUM_PFX:
                    self.sp = ch.lower()  # the radix letter picks the digits that may follow
                self.mode = nxt
                return True
        if end is _ENDS:
            return self._after_number(ch)
        if end is _ENDS_BEFORE_NON_DIGIT:
            if ch.isalnum() or ch == "_":
                raise Reject("invalid digit in number literal")
            return False
        raise Reject(end)

    def _after_number(self, ch: str) -> bool:
        if _name_continue(ch) and ch not in DIGITS:
            # CPython accepts a keyword right after a number (``1if x else y``) with a warning
            if any(k.startswith(ch) for k in NUMBER_KEYWORDS):
                self._significant(ch)
                self.mode = NAME
                self.sp = "#" + ch
                return True
            raise Reject("invalid decimal literal")
        return False

    # -- strings ----------------------------------------------------------------------------------

    def _open_string(self, q: str, raw: bool, byt: bool, fs: bool) -> None:
        b = self.brackets
        if not b:
            self.opener = False
        self.mode = STR_OPEN1
        self.sp = None
        self.q, self.raw, self.byt, self.fs = q, raw, byt, fs
        self.tri = False
        self.qn = 0
        self.esc = False

    def _end_string(self) -> None:
        self.mode = CODE
        self.sp = None
        self.q = ""
        self.tri = self.raw = self.byt = self.fs = False
        self.qn = 0

    def _string_char(self, ch: str) -> None:
        esc = self.esc
        if esc == "{":  # inside ``\N{...}`` of a non-raw f-string
            if ch == "}":
                self.esc = False
            elif ch == "\n" or ch == "\r" or ch == self.q:
                raise Reject("malformed \\N character escape")
            return
        if esc == "N":  # ``\N`` seen: ``{`` opens a character name, anything else is ordinary
            self.esc = False
            if ch == "{":
                self.esc = "{"
                return
        elif esc:
            self.esc = False
            if ch == "N" and self.fs and not self.raw:
                self.esc = "N"
                return
            if not (self.fs and (ch == "{" or ch == "}")):  # a brace after a backslash still counts
                if ch == "\r":
                    self.cr = True
                if self.byt and ch >= "\x80":
                    raise Reject("bytes can only contain ASCII literal characters")
                return
        if ch == self.q:
            if not self.tri:
                self._end_string()
                return
            self.qn += 1
            if self.qn == 3:
                self._end_string()
                self.qn = 0
            return
        self.qn = 0
        if ch == "\\":
            self.esc = True
            return
        if ch == "\n" or ch == "\r":
            if not self.tri:
                raise Reject("unterminated string literal")
            self.cr = ch == "\r"
            return
        if self.fs:
            if ch == "{":
                self.mode = FSTR_LBRACE
                return
            if ch == "}":
                self.mode = FSTR_RBRACE
                return
        if self.byt and ch >= "\x80":
            raise Reject("bytes can only contain ASCII literal characters")

_IDENT_RUN_B = re.compile(rb"[A-Za-z0-9_]*")
_IDENT_RUN_S = re.compile(r"[A-Za-z0-9_]*")
_COMMENT_RUN_B = re.compile(rb"[\x01-\x09\x0b\x0c\x0e-\x7f]*")
_COMMENT_RUN_S = re.compile(r"[^\x00\n\r]*")
_STRING_RUNS: dict = {}


def _string_run(q: str, fs: bool, byt: bool, as_bytes: bool):
    key = (q, fs, byt, as_bytes)
    pat = _STRING_RUNS.get(key)
    if pat is None:
        stop = "\\\\\\n\\r\\x00" + re.escape(q) + ("{}" if fs else "")
        if as_bytes:
            pat = re.compile(("[^" + stop + "\\x80-\\xff]*").encode("latin-1"))
        else:
            pat = re.compile("[^" + stop + ("\\x80-\\U0010ffff" if byt else "") + "]*")
        _STRING_RUNS[key] = pat
    return pat


def lex_text(text: str, style: str | None = None, start: Lex | None = None) -> Lex:
    """Run the automaton over ``text`` (from a fresh file start unless ``start``). Raises :class:`Reject`."""
    st = start.copy() if start is not None else Lex(style)
    st.feed_text(text)
    return st
