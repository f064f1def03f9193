"""Intent fingerprint: 16 named features of the editor context at the cursor, and the constraint mode
(with its generation policy) they select.

:func:`fingerprint` reads the document as text only; it never imports or runs user code. It is
deterministic, never raises on malformed input (broken, half-typed or binary-looking text gives a
best-effort answer), and explains itself (:attr:`Fingerprint.reasons`, :meth:`Fingerprint.as_dict`).

How the features are computed
-----------------------------
* **Cursor-local features** (1-10, 15, 16 and the ``def test_*`` part of 14) come from the tolerant
  scan of the *prefix* (the text before the cursor, :mod:`engine.lexing.scanner`): strings (all
  prefixes, triple quotes, escapes), f-string replacement fields (PEP 701 nesting, format specs),
  comments, brackets, backslash continuations and ``;``. Scanning the prefix only is what makes this robust while the
  user types: an unclosed ``requests.get("x", `` is simply an open call bracket, whatever the
  suffix holds. Scopes (class body, enclosing ``def``)
  come from the indentation of the logical lines before the cursor (Language Reference 2.1.8),
  which survives syntax errors that make a parser's tree unreliable at the cursor.
  The scanner's error recovery keeps one broken line from poisoning the rest of the file.
* **Document features** (11-13 and the import part of 14) come from tree-sitter-python's parse of
  the whole document (prefix + suffix): import statements (any form: ``import requests as rq``,
  ``from httpx import Client``, imports inside functions) and calls of the builtin ``open``. Imports
  inside ERROR nodes (a half-typed statement) are read from their line. Words in strings and
  comments never count. The tree of the previous request for the same path is reused (tree-sitter
  incremental parsing: ``Tree.edit`` + ``Parser.parse(data, old_tree)``), so a keystroke costs a
  partial reparse.

Compile once, run cheap: the scanner resumes from checkpoints of earlier scans, and the
tree-sitter tree is reparsed incrementally. Measured on a 1,000-line file (35,563 code points) on a
shared 2-core machine: about 0.2-0.6 ms per keystroke, 6-14 ms the first time a document is seen
(4-10 ms of it tree-sitter's full parse). Offsets are 0-based code points; nothing here counts
UTF-16 units.

Features (the order of :data:`FEATURES` and of :attr:`Fingerprint.vector`; booleans are 0/1)
--------------------------------------------------------------------------------------------
==  ======================  ===========================================================================
 #  name                    definition (:data:`FEATURE_DOCS` has the one-line text)
==  ======================  ===========================================================================
 1  in_call_args            the innermost open bracket of the innermost code context is a call's ``(``
 2  in_string               inside a string literal (docstrings included), not in a replacement field
 3  in_fstring_field        inside an f-string ``{...}`` replacement field (its code or format spec)
 4  in_comment              inside a ``#`` comment
 5  in_docstring            inside the first statement of a module/class/def body, a string (PEP 257)
 6  at_line_start           only whitespace between the line start and the cursor
 7  after_block_opener      blank up to the cursor after a block opener line ending in ``:``
 8  in_def_signature        in the parameters of a ``def`` or its return annotation before ``:``
 9  in_class_body           the innermost enclosing scope (by indentation) is a class body
10  in_import               the statement is ``import ...`` or ``from ... import ...``
11  http_client_in_scope    the document imports requests, httpx, urllib3 or aiohttp
12  subprocess_in_scope     the document imports subprocess
13  file_io_in_scope        the document calls ``open(`` or imports pathlib/io/yaml/json/csv/shutil
14  test_code               test path, pytest/unittest import, or inside a ``def test_*``
15  bracket_depth           ``min(depth, 4) / 4``
16  indent_depth            ``min(level, 8) / 8``; a tab is one level, the space unit is detected (4)
==  ======================  ===========================================================================

Mode rules (:func:`select_mode`; first match wins; a feature is on when > 0.5)
-----------------------------------------------------------------------------
====  ======================  ==================  =========  ==========  =========  ===============
rule  condition               mode                multiline  max_tokens  code_only  stop_at_newline
====  ======================  ==================  =========  ==========  =========  ===============
1     ``in_comment``          ``comment``         never      default     False      True
2     ``in_docstring``        ``docstring``       auto       default     False      False
3     ``in_string``           ``string``          never      default     False      True
4     ``in_import``           ``import``          never      16          True       True
5     ``in_call_args``        ``call-arguments``  never      default     True       True
6     otherwise               ``code``            auto       default     True       False
====  ======================  ==================  =========  ==========  =========  ===============

``auto`` is the engine's block-opener rule (a block body may follow a line ending in ``:``);
``default`` is the settings' ``max_tokens``. An f-string replacement field is code: ``in_string`` is
0 there, so rule 5 applies when the innermost bracket *inside the field* is a call's ``(``, else
rule 6. The end of a string is the lexer's business (the FSM), not the policy's.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from .lexing.calls import call_frames, paren_kind
from .lexing.scanner import WS as _WS
from .lexing.scanner import Scan, scan
from .text import common_prefix, common_suffix

FEATURES: tuple[str, ...] = (
    "in_call_args",
    "in_string",
    "in_fstring_field",
    "in_comment",
    "in_docstring",
    "at_line_start",
    "after_block_opener",
    "in_def_signature",
    "in_class_body",
    "in_import",
    "http_client_in_scope",
    "subprocess_in_scope",
    "file_io_in_scope",
    "test_code",
    "bracket_depth",
    "indent_depth",
)

FEATURE_DOCS: dict[str, str] = {
    "in_call_args": "the innermost open bracket of the innermost code context is a call's '(' (closed or not; "
                    "inside an f-string replacement field only brackets opened in the field count)",
    "in_string": "inside a string literal (also a docstring, also the literal text of an f-string); "
                 "0 inside an f-string replacement field",
    "in_fstring_field": "inside the code (or format spec) of an f-string '{...}' replacement field",
    "in_comment": "inside a '#' comment",
    "in_docstring": "inside a string that is the first statement of a module, class or function body "
                    "(PEP 257); not f-strings or bytes",
    "at_line_start": "only whitespace between the start of the physical line and the cursor",
    "after_block_opener": "at_line_start, at the start of a logical line, and the previous code line is a block "
                          "opener (def/class/if/elif/else/for/while/with/try/except/finally/match/case) ending in ':'",
    "in_def_signature": "inside the parameter list of a def, or its return annotation before the ':'",
    "in_class_body": "the innermost enclosing def/class scope (by indentation) is a class body",
    "in_import": "the statement at the cursor is an 'import' or 'from ... import'",
    "http_client_in_scope": "the document imports requests, httpx, urllib3 or aiohttp (any import form)",
    "subprocess_in_scope": "the document imports subprocess (or names from it)",
    "file_io_in_scope": "the document calls open(...) or imports pathlib, io, yaml, json, csv or shutil",
    "test_code": "the path is test_*.py, *_test.py or under a tests/ directory, or the document imports "
                 "pytest/unittest, or the cursor is inside a function named test_*",
    "bracket_depth": "open bracket depth at the cursor (f-string replacement braces excluded), min(depth, 4) / 4",
    "indent_depth": "indentation level of the cursor line (tab = 1 level; space unit detected, default 4), "
                    "min(level, 8) / 8",
}

MODES = ("code", "call-arguments", "string", "comment", "docstring", "import")

_INDEX = {name: i for i, name in enumerate(FEATURES)}


@dataclass(frozen=True)
class ModePolicy:
    """How a constraint mode generates. ``multiline``: ``"auto"`` (the engine's block-opener rule),
    ``"never"`` or ``"always"``; ``max_tokens``: a cap in tokens, None for the settings default;
    ``code_only``: comments are masked in the completion; ``stop_at_newline``: the completion ends at
    the end of the line."""

    mode: str
    multiline: str
    max_tokens: int | None
    code_only: bool
    stop_at_newline: bool
    description: str


POLICIES: dict[str, ModePolicy] = {
    "comment": ModePolicy("comment", "never", None, False, True,
                          "prose inside a '#' comment, to the end of the line"),
    "docstring": ModePolicy("docstring", "auto", None, False, False,
                            "prose inside a docstring; may span lines"),
    "string": ModePolicy("string", "never", None, False, True,
                         "the rest of a string literal on this line (the lexer knows where it closes)"),
    "import": ModePolicy("import", "never", 16, True, True,
                         "a short single-line import: module and names"),
    "call-arguments": ModePolicy("call-arguments", "never", None, True, True,
                                 "the arguments of an open call, on this line, no comments"),
    "code": ModePolicy("code", "auto", None, True, False,
                       "code; a block body may follow a block opener (multiline auto), no comments"),
}


@dataclass(frozen=True)
class Fingerprint:
    """The fingerprint of one cursor position. ``vector``: float32 ``[16]``, values in [0, 1],
    indexed like :data:`FEATURES` (read-only); ``mode`` one of :data:`MODES`; ``policy`` that mode's
    :class:`ModePolicy`; ``reasons``: why this mode, human-readable (for ``explain``)."""

    vector: np.ndarray
    mode: str
    policy: ModePolicy
    reasons: tuple[str, ...]

    def as_dict(self) -> dict:
        """JSON-ready: ``{"features": {name: value}, "mode": ..., "policy": {...}, "reasons": [...]}``."""
        return {
            "features": {name: float(v) for name, v in zip(FEATURES, self.vector.tolist())},
            "mode": self.mode,
            "policy": asdict(self.policy),
            "reasons": list(self.reasons),
        }

    def __getitem__(self, name: str) -> float:
        """The value of the feature called ``name`` (raises KeyError for an unknown name)."""
        return float(self.vector[_INDEX[name]])


def select_mode(vector) -> tuple[str, ModePolicy, tuple[str, ...]]:
    """The mode rule table of the module docstring applied to a fingerprint vector (array-like of 16
    floats in :data:`FEATURES` order; a feature is on when > 0.5). Returns ``(mode, policy,
    reasons)``. Raises ValueError when ``vector`` does not hold exactly 16 numbers (API misuse)."""
    try:
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"select_mode needs 16 numbers in FEATURES order, got {vector!r:.80}") from exc
    if v.shape != (len(FEATURES),):
        raise ValueError(f"select_mode needs 16 numbers in FEATURES order (engine.fingerprint.FEATURES), "
                         f"got shape {tuple(v.shape)}")
    on = {name: bool(v[i] > 0.5) for i, name in enumerate(FEATURES)}
    if on["in_comment"]:
        mode, why = "comment", ["rule 1: in_comment=1, the cursor is inside a '#' comment"]
    elif on["in_docstring"]:
        mode, why = "docstring", ["rule 2: in_docstring=1, the string is the first statement of a body (PEP 257)"]
    elif on["in_string"]:
        mode, why = "string", ["rule 3: in_string=1, the cursor is inside a string literal"]
    elif on["in_import"]:
        mode, why = "import", ["rule 4: in_import=1, the statement is an import"]
    elif on["in_call_args"]:
        mode, why = "call-arguments", ["rule 5: in_call_args=1, the innermost open bracket is a call's '('"]
        if on["in_fstring_field"]:
            why.append("the call is inside an f-string replacement field (code)")
    else:
        mode, why = "code", ["rule 6: no comment, docstring, string, import or call-argument context"]
        if on["in_fstring_field"]:
            why.append("in_fstring_field=1: the replacement field is code")
        if on["after_block_opener"]:
            why.append("after_block_opener=1: a block body may follow (multiline auto)")
        if on["in_def_signature"]:
            why.append("in_def_signature=1: parameters or return annotation of a def")
    policy = POLICIES[mode]
    why.append(f"policy: multiline {policy.multiline}, max_tokens {policy.max_tokens or 'default'}, "
               f"code_only {policy.code_only}, stop_at_newline {policy.stop_at_newline}")
    return mode, policy, tuple(why)


# ------------------------------------------------------------------------------------------------
# document facts (tree-sitter)

HTTP_CLIENTS = frozenset({"requests", "httpx", "urllib3", "aiohttp"})
FILE_IO_MODULES = frozenset({"pathlib", "io", "yaml", "json", "csv", "shutil"})
TEST_MODULES = frozenset({"pytest", "unittest"})

_FACT_WORDS = (b"import", b"open")
_LINE_IMPORT = re.compile(rb"[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([^\n;#]*))")
_LEADING_NAME = re.compile(rb"\s*([A-Za-z_]\w*)")


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


class _Trees:
    """The last tree-sitter tree per document key (the path), reparsed incrementally: the edit is the
    changed middle between the old and new bytes (common prefix and suffix), applied with
    ``Tree.edit`` so that ``Parser.parse(data, old_tree)`` reuses the unchanged subtrees."""

    def __init__(self, size: int = 8):
        self._lock = threading.Lock()
        self._docs: OrderedDict = OrderedDict()
        self._size = size

    def parse(self, key, data: bytes):
        from tree_sitter import Point

        with self._lock:
            old = self._docs.pop(key, None)
            parser = _parser()
            if old is None:
                tree = parser.parse(data)
            elif old[0] == data:
                tree = old[1]
            else:
                before, tree = old
                a = common_prefix(before, data)
                s = common_suffix(before, data, a)
                while a and a < len(data) and data[a] & 0xC0 == 0x80:  # UTF-8 character boundaries
                    a -= 1
                while s and data[len(data) - s] & 0xC0 == 0x80:
                    s -= 1

                def point(b: bytes, off: int):
                    return Point(b.count(b"\n", 0, off), off - (b.rfind(b"\n", 0, off) + 1))

                tree.edit(start_byte=a, old_end_byte=len(before) - s, new_end_byte=len(data) - s,
                          start_point=point(data, a), old_end_point=point(before, len(before) - s),
                          new_end_point=point(data, len(data) - s))
                tree = parser.parse(data, tree)
            self._docs[key] = (data, tree)
            while len(self._docs) > self._size:
                self._docs.popitem(last=False)
            return tree


_TREES = _Trees()


def _first_name(node) -> str:
    """``a`` for the dotted_name ``a.b.c`` (or an aliased_import of it); "" otherwise."""
    if node.type == "aliased_import":
        node = node.child_by_field_name("name")
    if node is None or node.type != "dotted_name" or not node.named_children:
        return ""
    return node.named_children[0].text.decode("utf-8", "replace")


def _occurrences(data: bytes):
    """``(word, byte offset)`` of every occurrence of the words of :data:`_FACT_WORDS` (``bytes.find``
    is an order of magnitude faster here than a regular expression with word boundaries)."""
    for word in _FACT_WORDS:
        at = data.find(word)
        while at >= 0:
            yield word, at
            at = data.find(word, at + len(word))


def _document_facts(data: bytes, key) -> tuple[frozenset[str], bool]:
    """``(top-level names of the imported modules, whether the builtin open() is called)`` in the
    document ``data`` (UTF-8)."""
    root = _TREES.parse(key, data).root_node
    modules: set[str] = set()
    opens = False
    done: set[int] = set()
    for word, at in _occurrences(data):
        node = root.descendant_for_byte_range(at, at + len(word))
        if node is None or node.type not in ("identifier", "import") or node.start_byte != at or (
                node.end_byte != at + len(word)):
            continue  # part of a longer name, or in a string or comment
        if word == b"open":
            parent = node.parent
            if not opens and node.type == "identifier" and parent is not None and parent.type == "call":
                opens = parent.child_by_field_name("function").start_byte == node.start_byte
            continue
        stmt = node.parent
        if stmt is None or stmt.start_byte in done:
            continue
        done.add(stmt.start_byte)
        if stmt.type == "import_statement":
            modules.update(_first_name(c) for c in stmt.children_by_field_name("name"))
        elif stmt.type == "import_from_statement":
            modules.add(_first_name(stmt.child_by_field_name("module_name")))
        elif stmt.type == "ERROR":  # a half-typed import: read its line
            line = data.rfind(b"\n", 0, at) + 1
            lm = _LINE_IMPORT.match(data, line)
            if lm and lm.group(1):
                modules.add(lm.group(1).decode())
            elif lm:
                for part in lm.group(2).split(b","):
                    nm = _LEADING_NAME.match(part)
                    if nm:
                        modules.add(nm.group(1).decode())
    modules.discard("")
    return frozenset(modules), opens


# ------------------------------------------------------------------------------------------------
# the fingerprint

_BLOCK_OPENER = re.compile(
    r"[ \t]*(?:async[ \t]+)?(?:def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b")
_ENDS_WITH_COLON = re.compile(r":[ \t]*(?:#[^\n]*)?\n?\Z")
_SCOPE_HEADER = re.compile(r"(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
_DEF_STMT = re.compile(r"[ \t]*(?:async[ \t]+)?def\b")
_IMPORT_STMT = re.compile(r"[ \t]*(?:import|from)\b")
_HEADER_SAME_LINE = re.compile(r"[ \t]*(?:(?:async[ \t]+)?def|class)\b.*:[ \t]*\Z")
_INDENTS = re.compile(r"\n([ \t]*)[^ \t\n#]")
_UNIT_WINDOW = 16_000  # code points before the cursor (and a quarter of it after) used to detect the indentation unit


def _width(ws: str) -> int:
    return len(ws.expandtabs(8)) if "\t" in ws else len(ws)


def _indent_unit(doc: str, cursor: int) -> int:
    """The most common positive indentation step (spaces) between consecutive code lines near the
    cursor; 4 when there is none."""
    steps: Counter = Counter()
    prev = 0
    for ws in _INDENTS.findall(doc, max(0, cursor - _UNIT_WINDOW), cursor + _UNIT_WINDOW // 4):
        if "\t" in ws:
            continue
        w = len(ws)
        if 0 < w - prev <= 8:
            steps[w - prev] += 1
        prev = w
    return steps.most_common(1)[0][0] if steps else 4


def _is_test_path(path: str | None) -> bool:
    if not path:
        return False
    parts = re.split(r"[\\/]", path)
    name = parts[-1]
    return (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py") or "tests" in parts[:-1]


def _line_code_start(text: str, s: int, e: int) -> int:
    """Offset of the first character of the line [s, e) that is not whitespace, or -1 when the line
    is blank or only a comment."""
    i = _WS.match(text, s).end()
    return -1 if i >= e or text[i] in "\n#" else i


def _previous_code_line(lx: Scan, ls: int) -> tuple[int, int, int]:
    """``(start, code start, end)`` of the logical line before the one starting at ``ls`` that holds
    code (blank and comment-only lines skipped); ``(-1, -1, -1)`` when there is none."""
    text = lx.text
    p = ls
    while p > 0:
        s = lx.logical_start(p - 1)
        i = _line_code_start(text, s, p)
        if i >= 0:
            return s, i, p
        p = s
    return -1, -1, -1


def fingerprint(prefix: str, suffix: str, path: str | None = None) -> Fingerprint:
    """The intent fingerprint of the cursor between ``prefix`` (the document text before the cursor)
    and ``suffix`` (after it); both are code-point strings, ``\\r\\n`` and ``\\r`` line ends are
    accepted. ``path`` (optional) is only used for the test-file rule. Never raises: malformed,
    half-typed or binary text gives a best-effort fingerprint. Results are cached (LRU, keyed by the
    text); a 1,000-line document costs a few ms the first time and less per keystroke after (the
    tree-sitter tree is reused incrementally)."""
    return _fingerprint_cached(prefix if isinstance(prefix, str) else "", suffix if isinstance(suffix, str) else "",
                               path if isinstance(path, str) else None)


@lru_cache(maxsize=8)  # keyed by whole texts: keep it small
def _fingerprint_cached(prefix: str, suffix: str, path: str | None) -> Fingerprint:
    if "\r" in prefix:
        prefix = prefix.replace("\r\n", "\n").replace("\r", "\n")
    if "\r" in suffix:
        suffix = suffix.replace("\r\n", "\n").replace("\r", "\n")
    vector = _features(prefix, suffix, path)
    vector.setflags(write=False)
    mode, policy, reasons = select_mode(vector)
    return Fingerprint(vector, mode, policy, reasons)


def _features(text: str, suffix: str, path: str | None) -> np.ndarray:
    v = np.zeros(len(FEATURES), dtype=np.float32)
    n = len(text)
    doc = text + suffix
    lx = scan(text)
    stack = lx.stack
    context = lx.context

    # 1 in_call_args, 15 bracket_depth
    entries = call_frames(lx)
    if entries and entries[-1][0] == "(" and paren_kind(text, entries[-1][1], lx) == "call":
        v[0] = 1
    depth = sum(1 for e in stack if e[0] in "([{")
    v[14] = min(depth, 4) / 4

    # 2-5 string, f-string field, comment, docstring
    v[1] = context == "string"
    v[2] = context == "field"
    v[3] = context == "comment"

    line_start = text.rfind("\n") + 1
    ls = lx.logical_start(n)
    stmt = lx.semi + 1 if lx.semi >= ls else ls
    if context == "string" and lx.string_prefix in ("", "r", "u") and not stack:
        before = text[ls:lx.string_start]  # the string starts its statement, or follows `def f():`
        if _HEADER_SAME_LINE.match(before):
            v[4] = 1
        elif not before.strip():
            ps, pi, pe = _previous_code_line(lx, ls)
            if ps < 0 or (_SCOPE_HEADER.match(text, pi) and _ENDS_WITH_COLON.search(text, pi, pe)):
                v[4] = 1  # first statement of the module, or of a def/class body

    # 6 at_line_start, 7 after_block_opener, 16 indent_depth
    cursor_line = text[line_start:]
    at_line_start = not cursor_line.strip(" \t\f")
    v[5] = at_line_start
    opener_width = -1
    if at_line_start and ls == line_start and context == "code" and not stack:
        ps, pi, pe = _previous_code_line(lx, ls)
        if ps >= 0 and _BLOCK_OPENER.match(text, ps) and _ENDS_WITH_COLON.search(text, pi, pe):
            v[6] = 1
            opener_width = _width(text[ps:pi])
    nl = suffix.find("\n")
    suffix_line = suffix if nl < 0 else suffix[:nl]
    if at_line_start and suffix_line.strip():
        line_ws = cursor_line + _WS.match(suffix_line).group()
    elif at_line_start:
        line_ws = cursor_line
    else:
        line_ws = _WS.match(cursor_line).group()
    if line_ws:
        tabs = line_ws.count("\t")
        spaces = len(line_ws) - tabs
        level = tabs + (spaces // _indent_unit(doc, n) if spaces else 0)
        v[15] = min(level, 8) / 8

    # 8 in_def_signature
    if _DEF_STMT.match(text, stmt):
        in_parameters = stack and stack[0][0] == "(" and stack[0][1] >= stmt and paren_kind(text, stack[0][1], lx) == "def"
        # after the parameters: the return annotation lasts until the ':' at depth 0
        in_annotation = lx.close0 >= stmt and (not stack or stack[0][0] in "([{") and ":" not in text[lx.close0 + 1:n]
        v[7] = bool(in_parameters or in_annotation)

    # 9 in_class_body, 14 test_code (enclosing test_ function): scopes by indentation
    limit = _width(line_ws) if ls == line_start else _width(_WS.match(text, ls).group())
    if opener_width >= 0:
        limit = max(limit, opener_width + 1)
    innermost = None
    in_test_function = False
    p = ls
    while p > 0 and limit > 0:
        s = lx.logical_start(p - 1)
        i = _line_code_start(text, s, p)
        if i >= 0:
            w = _width(text[s:i])
            if w < limit:
                limit = w
                h = _SCOPE_HEADER.match(text, i)
                if h:
                    innermost = innermost or h.group(1)
                    in_test_function = in_test_function or (h.group(1) == "def" and h.group(2).startswith("test_"))
        p = s
    v[8] = innermost == "class"

    # 10 in_import
    v[9] = bool(_IMPORT_STMT.match(text, stmt))

    # 11-14 document facts
    modules, opens = _document_facts(doc.encode("utf-8", "surrogatepass"), path)
    v[10] = bool(modules & HTTP_CLIENTS)
    v[11] = "subprocess" in modules
    v[12] = opens or bool(modules & FILE_IO_MODULES)
    v[13] = _is_test_path(path) or bool(modules & TEST_MODULES) or in_test_function
    return v
