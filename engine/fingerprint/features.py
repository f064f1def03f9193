"""The 16 features of the cursor (:data:`~engine.fingerprint.modes.FEATURES`) and :func:`fingerprint`:
cursor-local features from the tolerant scan of the prefix (:mod:`engine.lexing.scanner`) and the
indentation of the logical lines before the cursor, document features from :mod:`.facts`."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..lexing.calls import call_frames, paren_kind
from ..lexing.scanner import WS as _WS
from ..lexing.scanner import Scan, scan
from ..lexing.vocabulary import COMPOUND_KEYWORDS, indent_step
from .facts import FILE_IO_MODULES, HTTP_CLIENTS, TEST_MODULES, _document_facts
from .modes import FEATURES, Fingerprint, select_mode

_BLOCK_OPENER = re.compile(
    r"[ \t]*(?:async[ \t]+)?(?:" + "|".join(k for k in COMPOUND_KEYWORDS if k != "async") + r")\b")
_ENDS_WITH_COLON = re.compile(r":[ \t]*(?:#[^\n]*)?\n?\Z")
_SCOPE_HEADER = re.compile(r"(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
_DEF_STMT = re.compile(r"[ \t]*(?:async[ \t]+)?def\b")
_IMPORT_STMT = re.compile(r"[ \t]*(?:import|from)\b")
_HEADER_SAME_LINE = re.compile(r"[ \t]*(?:(?:async[ \t]+)?def|class)\b.*:[ \t]*\Z")
def _width(ws: str) -> int:
    return len(ws.expandtabs(8)) if "\t" in ws else len(ws)


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
    v[4] = _in_docstring(text, lx, ls)

    # 6 at_line_start, 7 after_block_opener, 16 indent_depth
    cursor_line = text[line_start:]
    at_line_start = not cursor_line.strip(" \t\f")
    v[5] = at_line_start
    opener_width = -1
    if at_line_start and ls == line_start and context == "code" and not stack:
        opener_width = _block_opener_width(text, lx, ls)
        v[6] = opener_width >= 0
    line_ws = _line_indentation(cursor_line, suffix, at_line_start)
    if line_ws:
        tabs = line_ws.count("\t")
        spaces = len(line_ws) - tabs
        level = tabs + (spaces // indent_step(doc, n) if spaces else 0)
        v[15] = min(level, 8) / 8

    # 8 in_def_signature, 10 in_import
    v[7] = _in_def_signature(text, lx, stmt)
    v[9] = bool(_IMPORT_STMT.match(text, stmt))

    # 9 in_class_body, 14 test_code (enclosing test_ function): scopes by indentation
    limit = _width(line_ws) if ls == line_start else _width(_WS.match(text, ls).group())
    if opener_width >= 0:
        limit = max(limit, opener_width + 1)
    innermost, in_test_function = _enclosing_scope(text, lx, ls, limit)
    v[8] = innermost == "class"

    # 11-14 document facts
    modules, opens = _document_facts(doc.encode("utf-8", "surrogatepass"), path)
    v[10] = bool(modules & HTTP_CLIENTS)
    v[11] = "subprocess" in modules
    v[12] = opens or bool(modules & FILE_IO_MODULES)
    v[13] = _is_test_path(path) or bool(modules & TEST_MODULES) or in_test_function
    return v


def _in_docstring(text: str, lx, ls: int) -> bool:
    """The cursor is in a plain string that starts its statement as the first statement of the
    module or of a def/class body (PEP 257), or that follows ``def f():`` on the header's line."""
    if not (lx.context == "string" and lx.string_prefix in ("", "r", "u") and not lx.stack):
        return False
    before = text[ls:lx.string_start]
    if _HEADER_SAME_LINE.match(before):
        return True
    if before.strip():
        return False
    ps, pi, pe = _previous_code_line(lx, ls)
    return ps < 0 or bool(_SCOPE_HEADER.match(text, pi) and _ENDS_WITH_COLON.search(text, pi, pe))


def _block_opener_width(text: str, lx, ls: int) -> int:
    """The indentation width (columns) of the previous code line when it opens a block (ends in
    ``:``), else -1; ``ls``: the start of the cursor's logical line."""
    ps, pi, pe = _previous_code_line(lx, ls)
    if ps >= 0 and _BLOCK_OPENER.match(text, ps) and _ENDS_WITH_COLON.search(text, pi, pe):
        return _width(text[ps:pi])
    return -1


def _line_indentation(cursor_line: str, suffix: str, at_line_start: bool) -> str:
    """The cursor line's indentation: on a blank line what is typed plus the suffix's whitespace."""
    if not at_line_start:
        return _WS.match(cursor_line).group()
    nl = suffix.find("\n")
    suffix_line = suffix if nl < 0 else suffix[:nl]
    return cursor_line + _WS.match(suffix_line).group() if suffix_line.strip() else cursor_line


def _in_def_signature(text: str, lx, stmt: int) -> bool:
    """In a ``def`` statement's parameters, or in its return annotation (until the ``:`` at depth 0)."""
    if not _DEF_STMT.match(text, stmt):
        return False
    stack = lx.stack
    in_parameters = stack and stack[0][0] == "(" and stack[0][1] >= stmt and paren_kind(text, stack[0][1], lx) == "def"
    in_annotation = lx.close0 >= stmt and (not stack or stack[0][0] in "([{") and ":" not in text[lx.close0 + 1:]
    return bool(in_parameters or in_annotation)


def _enclosing_scope(text: str, lx, ls: int, limit: int) -> tuple[str | None, bool]:
    """The innermost enclosing ``def``/``class`` (by indentation: the nearest header line above
    ``ls`` that is indented less than ``limit`` columns) and whether a ``test_`` function encloses."""
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
    return innermost, in_test_function
