"""The name table the names monitor judges against (:mod:`.names`): what one document binds or
uses, and the names every module has without a binding (builtins, module dunders, soft keywords).

A tolerant regex scan, not ``ast``: half-typed code and any text give an answer.
"""

from __future__ import annotations

import builtins
import functools
import re
from dataclasses import dataclass

from ..lexing.vocabulary import SOFT_KEYWORDS
from ..text import common_prefix, common_suffix

MODULE_DUNDERS = frozenset({
    "__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__", "__path__", "__builtins__",
    "__annotations__", "__cached__", "__debug__", "__dict__", "__class__", "__qualname__", "__module__",
    "__all__", "__version__", "__author__", "__slots__",
})
"""Names every module, class body or method has without a binding in the text (Python reference,
"The standard type hierarchy": modules, ``__class__`` for zero-argument ``super``)."""
# soft keywords a load may use without a binding in the text: those that start a statement
# (match, case, type; the monitor leaves match statements alone). ``_`` is a wildcard only inside
# a case pattern; a load of ``_`` elsewhere needs a binding like any name (pyflakes F821), and a
# document that binds it (``_ = gettext.gettext``, ``gettext.install()`` and its ``_(...)`` calls) uses it
STATEMENT_SOFT_KEYWORDS = SOFT_KEYWORDS - {"_"}
BUILTIN_NAMES = frozenset(dir(builtins))
# what can bind a name without its text: a star import, exec, writes through globals()/locals()/
# vars() (reading them binds nothing), and the builtins namespace changed at run time. ``__import__``
# and ``sys.modules`` return or register modules; they bind no name of this module.
_NAMESPACE = r"\b(?:globals|locals|vars)[ \t]*\([ \t]*\)[ \t]*"
_DYNAMIC = re.compile(
    r"\bimport[ \t]*\*|\bexec[ \t]*\(|\b__builtins__\b|\bbuiltins\.\w+[ \t]*=(?!=)|\bsys\.modules\[[ \t]*__name__"
    r"|\bsetattr[ \t]*\([ \t]*(?:builtins|__builtins__)\b|"
    + _NAMESPACE + r"\[[^\]\n]*\][ \t]*(?:=(?!=)|[-+*/|&^%@]=)"  # globals()["x"] = 1
    + r"|" + _NAMESPACE + r"\.[ \t]*(?:update|setdefault|__setitem__)\b"  # globals().update(...)
    + r"|=[ \t]*" + _NAMESPACE + r"(?:#.*)?$",  # g = globals(): written through later
    re.MULTILINE)
# every _DYNAMIC match is on a line with one of these words (a cheap first pass over a large file)
_DYNAMIC_HINT = re.compile(r"import[ \t]*\*|exec|builtins|sys\.modules|setattr|globals|locals|vars")


def _dynamic_matches(text: str):
    """The :data:`_DYNAMIC` matches of ``text``, in order, searched only on the lines that
    :data:`_DYNAMIC_HINT` finds (each of its alternatives lies within one line)."""
    done = -1
    for hint in _DYNAMIC_HINT.finditer(text):
        if hint.start() < done:
            continue
        start = text.rfind("\n", 0, hint.start()) + 1
        end = text.find("\n", hint.end())
        done = len(text) if end < 0 else end
        yield from _DYNAMIC.finditer(text, start, done)


_TOKEN = re.compile(r'''
    (?P<str>(?P<prefix>[rRbBuUfFtT]{0,2})
        (?:"""(?:\\[\s\S]|[^\\])*?(?:"""|\Z) | \'\'\'(?:\\[\s\S]|[^\\])*?(?:\'\'\'|\Z)
         | "(?:\\[\s\S]|[^"\\\n])*(?:"|$) | '(?:\\[\s\S]|[^'\\\n])*(?:'|$)))
  | (?P<comment>\#[^\n]*)
  | (?P<name>[^\W\d]\w*)
  | (?P<ellipsis>\.\.\.)
  | (?P<dot>\.)
  | (?P<num>\d[\w.]*)
''', re.VERBOSE | re.MULTILINE)
_FIELD_NAME = re.compile(r"(?<![.\w])([^\W\d]\w*)")
# the strings and comments of :data:`_TOKEN` alone, without a match (and a Python call) per name; a
# quote can follow a name's letters only where a keyword meets a string (``if"x"``), and then the
# string prefix may take the keyword's last letters, which changes no :data:`_DYNAMIC` match
_PROSE = re.compile(_TOKEN.pattern.split("| (?P<name>")[0], re.VERBOSE | re.MULTILINE)


@dataclass(frozen=True)
class DocumentNames:
    """The names of one document: ``names`` every identifier it uses or binds outside strings,
    comments and attribute positions (f-string fields included), ``attributes`` the identifiers
    written after a ``.``, ``dynamic`` True when its namespace is not static (then no names
    monitor applies)."""

    names: frozenset
    attributes: frozenset
    dynamic: bool


def _blank(text: str) -> str:
    """``text`` with every character but line breaks a space."""
    return "\n".join(" " * len(part) for part in text.split("\n"))


def is_dynamic(text: str, path: str | None = None) -> bool:
    """Can the code of ``text`` bind a name that its text does not show (:data:`_DYNAMIC`: a star
    import, ``exec``, writes through ``globals()``...)? Read in code only: ``# from x import *``
    in a comment or ``ast.parse("from bar import *")`` in a string binds nothing. A star import of a
    module found as source (:func:`star_import_names`, ``path`` the document's file) is static."""
    return namespace(text, path)[0]


@functools.lru_cache(maxsize=4)  # the names monitor's setup and the names judge ask about the same document
def namespace(text: str, path: str | None = None, depth: int = 0) -> tuple[bool, frozenset]:
    """``(dynamic, star_names)``: :func:`is_dynamic`, and the names the document's star imports
    bring when every one of them resolves to Python source (empty otherwise). ``depth``: how many
    star imports led here (see :data:`_STAR_DEPTH`)."""
    if not any(_dynamic_matches(text)):
        return False, frozenset()
    code = _PROSE.sub(lambda m: _blank(m.group()), text)  # strings and comments blanked
    star: set[str] = set()
    for m in _dynamic_matches(code):
        if _binds_nothing(code, m):
            continue
        names = _star_names(code, m, path, depth) if m.group().startswith("import") else None
        if names is None:
            return True, frozenset()
        star |= names
    return False, frozenset(star)


_STAR_FROM = re.compile(r"\bfrom[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*\Z")
_STAR_DEPTH = 3  # star imports followed through modules that star-import in turn


def _star_names(code: str, m: re.Match, path: str | None, depth: int) -> frozenset | None:
    """The names ``from MODULE import *`` at match ``m`` (on ``import *``) may bind: every name the
    module's source uses or binds (lenient: a superset of its public names), or None when the
    module is not found as a ``.py`` file or its own namespace is dynamic."""
    head = _STAR_FROM.search(code, code.rfind("\n", 0, m.start()) + 1, m.start() + len("import"))
    if head is None:
        return None
    found = module_source(head.group(2), len(head.group(1)), path)
    return None if found is None else star_import_names(str(found), depth)


def star_import_names(file: str, depth: int = 0) -> frozenset | None:
    """What ``from <the module in file> import *`` may bind (see :func:`_star_names`); None when not
    static. Memoised by file and modification time."""
    import os

    try:
        mtime = os.stat(file).st_mtime_ns
    except OSError:
        return None
    return _module_star_names(file, mtime, depth)


@functools.lru_cache(maxsize=256)
def _module_star_names(file: str, mtime: int, depth: int) -> frozenset | None:
    from ..text import read_source

    if depth >= _STAR_DEPTH:
        return None
    try:
        text = read_source(file)
    except (OSError, UnicodeError, ValueError):
        return None
    dynamic, star = namespace(text, file, depth + 1)
    return None if dynamic else document_names_plain(text) | star


def module_source(module: str, level: int, path: str | None):
    """The ``.py`` file (a :class:`pathlib.Path`) of ``module`` imported from the document ``path``
    with ``level`` leading dots (relative import), searched as the import system would, without
    importing anything: the document's package for a relative import, else the document's own
    directory and then ``sys.path``. None when not found as source (a C extension, a namespace
    package, an unknown module)."""
    import sys
    from pathlib import Path

    parts = [p for p in module.split(".") if p]
    if level:
        if not path:
            return None
        base = Path(path).resolve().parent
        for _ in range(level - 1):
            base = base.parent
        roots = [base]
    else:
        roots = ([Path(path).resolve().parent] if path else []) + [Path(p) for p in sys.path if p]
    for root in roots:
        target = root.joinpath(*parts) if parts else root
        for candidate in (target.with_suffix(".py") if parts else None, target / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


_NAMESPACE_CALL = re.compile(r"\b(?:globals|locals|vars)[ \t]*\(")
# a write through a namespace object (after its name): item assignment, update/setdefault/__setitem__,
# a new attribute (``__builtins__.x = 1``) or a reassignment
_WRITE_AFTER = re.compile(r"[ \t]*(?:\[[^\]\n]*\][ \t]*(?:(?<![=!<>])=(?!=)|[-+*/|&^%@]=)"
                          r"|\.[ \t]*(?:update|setdefault|__setitem__)\b|\.[ \t]*(\w+)[ \t]*=(?!=)|=(?!=))")
_ALIAS = re.compile(r"(?:^|[;:])[ \t]*([^\W\d]\w*)[ \t]*=[ \t]*\Z", re.MULTILINE)


def _binds_nothing(code: str, m: re.Match) -> bool:
    """Does the :data:`_DYNAMIC` match ``m`` bind no name of this module after all? ``code``: the
    text with strings and comments blanked. Reading a namespace binds nothing; these do not either:

    * ``exec(source, ns)`` into a dictionary of its own (:func:`_exec_into_own_namespace`);
    * ``builtins.open = ...``: replacing a builtin that exists binds no new name;
    * ``__builtins__`` read (``__builtins__['len']``, ``__builtins__.get``), not written;
    * ``g = globals()`` where ``g`` is then only read (``g['x']``, ``g.items()``), never written
      through nor handed on (an argument or another name);
    * a write through ``locals()`` or ``vars()`` in a function body: it changes a snapshot, never
      the function's variables (the ``locals()`` documentation; PEP 667); in a class body it
      binds class attributes, which no other scope sees as names (methods reach them as
      ``self.name``; a load in that class body itself, after the write, is the one case this
      leaves to the user)."""
    text = m.group()
    if re.search(r"\b(?:locals|vars)\b", text) and _in_block(code, m.start()):  # ``locals()[...] =``, ``ns = locals()``
        return True
    if text.startswith("exec"):
        return _exec_into_own_namespace(code, m)
    if text.startswith("builtins."):
        return text[len("builtins."):].split("=")[0].strip() in BUILTIN_NAMES
    if text == "__builtins__":
        write = _WRITE_AFTER.match(code, m.end())
        return write is None or (write.group(1) or "") in BUILTIN_NAMES and bool(write.group(1))
    if text.startswith("="):  # g = globals(): judged by what is done with g
        line_start = code.rfind("\n", 0, m.start()) + 1
        alias = _ALIAS.search(code, line_start, m.start() + 1)
        if alias is None:
            return False
        for use in re.finditer(rf"(?<![\w.]){re.escape(alias.group(1))}\b", code):
            if use.start() == alias.start(1):
                continue  # the binding itself
            if _WRITE_AFTER.match(code, use.end()) or not re.match(r"[ \t]*[\[.]", code[use.end(): use.end() + 40]):
                return False  # written through, or handed on as a value (it may be written elsewhere)
        return True
    return False


def _in_block(code: str, offset: int) -> bool:
    """Is ``offset`` in the body of a ``def`` or ``class`` (the nearest enclosing block header of
    those two kinds, found by indentation), not at module level? ``code``: strings and comments
    blanked, so their lines read as blank."""
    line_start = code.rfind("\n", 0, offset) + 1
    line = code[line_start:offset]
    width = len(line) - len(line.lstrip(" \t"))
    end = line_start - 1
    while width > 0 and end > 0:
        start = code.rfind("\n", 0, end) + 1
        row = code[start:end]
        end = start - 1
        stripped = row.lstrip(" \t")
        if not stripped or len(row) - len(stripped) >= width:
            continue
        width = len(row) - len(stripped)
        if re.match(r"(?:async[ \t]+)?def\b|class\b", stripped):
            return True
    return False


def _exec_into_own_namespace(code: str, m: re.Match) -> bool:
    """Is match ``m`` an ``exec(source, namespace, ...)`` whose namespace is a dict of its own
    (``exec(code, ns)`` binds nothing here; ``exec(code)`` and ``exec(code, globals())`` do)?
    ``code``: the text with strings and comments blanked, so brackets count true."""
    if not m.group().startswith("exec"):
        return False
    depth, i, comma = 1, m.end(), -1
    while i < len(code) and depth:
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1 and comma < 0:
            comma = i
        i += 1
    return comma >= 0 and not _NAMESPACE_CALL.search(code, comma, i)


def document_names(text: str, cursor: int | None = None, path: str | None = None, spans=None) -> DocumentNames:
    """Scan ``text`` (a whole document, half-typed code welcome: unterminated strings end at their
    line or the text's end) for its names. A tolerant regex scanner, not ``ast``: any text gives an
    answer. Lenient on purpose: a name *used* anywhere counts as known, so the monitor never refuses
    what the document itself does. The names its star imports bring are added when those modules
    are found as source (``path``: the document's file, for relative imports; :func:`namespace`).

    With ``cursor`` (a code-point offset, 0-based) the names are those a load at the cursor can
    see (Python's scoping, Language Reference 4.2.2): the bodies of functions that do not enclose
    the cursor are left out (their locals are not visible there; :func:`hidden_bodies`), except
    the names of their ``global``/``nonlocal`` statements. Still lenient: class bodies, headers and
    every enclosing function stay whole, and a document with a star import keeps every body (a name
    its other functions load may come from that module in ways this scan cannot see, as dead code
    does: ctypes' ``test_strings.py`` uses ``c_wstring`` in skipped tests). ``spans``: the
    :func:`hidden_bodies` of ``text`` at ``cursor`` when the caller has them."""
    dynamic, star = namespace(text, path)
    # with a star import, a name only loaded in another function is likely the module's: kept
    if cursor is None or star:
        spans = []
    elif spans is None:
        spans = hidden_bodies(text, cursor)
    declared: frozenset = frozenset()
    if spans:
        text, _, declared = stubbed(text, spans, 0)
    names, attributes = _scan(text)
    return DocumentNames(frozenset(names | declared | star), frozenset(attributes), dynamic)


def document_names_plain(text: str) -> frozenset:
    """Every name ``text`` uses or binds outside strings, comments and attribute positions (no
    scoping, no star imports); with the words in its strings too when it has an ``__all__`` (a
    module ``__getattr__`` may provide what ``__all__`` lists, PEP 562)."""
    names, _ = _scan(text)
    if "__all__" in names:
        for m in _TOKEN.finditer(text):
            if m.lastgroup == "str":
                names.update(re.findall(r"[^\W\d]\w*", m.group("str")))
    return frozenset(names)


def _scan(text: str) -> tuple[set, set]:
    """``(names, attributes)``: the identifiers of ``text`` outside strings and comments (f-string
    fields included), those after a ``.`` apart."""
    names: set[str] = set()
    attributes: set[str] = set()
    after_dot = False
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "name":
            (attributes if after_dot else names).add(m.group("name"))
            after_dot = False
        elif kind == "dot":
            after_dot = True
        elif kind == "str":
            after_dot = False
            if set(m.group("prefix").lower()) & {"f", "t"}:
                body = m.group("str")
                for field in re.findall(r"\{([^{}]*)\}", body):
                    names.update(_FIELD_NAME.findall(field))
        elif kind != "comment":
            after_dot = False
    return names, attributes


_DECLARED = re.compile(r"\b(?:global|nonlocal)[ \t]+([^\W\d]\w*(?:[ \t]*,[ \t]*[^\W\d]\w*)*)")
# the tokens :func:`_scan_scopes` reads: strings and comments whole, brackets, colons, line breaks
# and continuations, and any other run of characters as one ``name`` (``self.assertEqual``,
# ``x=1``): the scan only asks whether a line's first token is ``def``, ``class`` or ``async``, and
# a match (a Python step) per name, dot and operator cost a 200 kB file 100 ms
_SCOPE_TOKEN = re.compile(_PROSE.pattern + r"""
  | (?P<name>[^\s()\[\]{}:\#'"\\]+)
  | (?P<open>[(\[{]) | (?P<close>[)\]}]) | (?P<colon>:) | (?P<nl>\n) | (?P<cont>\\\n)
  | (?P<other>[^\s])
""", re.VERBOSE | re.MULTILINE)


def hidden_bodies(text: str, cursor: int) -> tuple[tuple[int, int], ...]:
    """Spans ``[start, end)`` of the bodies of ``def`` statements that do not enclose ``cursor``, and
    of their parameter lists (parameters are locals; a name a default or an annotation loads is
    bound where the ``def`` stands, so it is known from there), sorted and not overlapping. A body is what follows its header's ``:``: the rest of that
    line when code follows the colon, else the lines indented deeper than the ``def`` (blank and
    comment-only lines, lines inside brackets or strings and backslash continuations never end
    it). Read with the names scanner's tokens, so a ``def`` in a string or comment is none. A
    bracket left open (the cursor's line, typed so far) ends at the next line that starts with
    ``def``, ``async def`` or ``class``, which no bracket can hold."""
    return scope_spans(text, cursor)[0]


def hidden_scopes(text: str, cursor: int) -> tuple[tuple[int, int], ...]:
    """:func:`hidden_bodies` and the bodies of the ``class`` statements that do not enclose
    ``cursor`` (a class body's names are visible in neither its methods nor outside it), sorted and
    not overlapping."""
    return scope_spans(text, cursor)[1]


@functools.lru_cache(maxsize=4)  # the names monitor's setup and its judge ask about the same document
def scope_spans(text: str, cursor: int) -> tuple[tuple, tuple]:
    """``(hidden_bodies, hidden_scopes)`` of ``text`` at ``cursor``: the scopes of :func:`_scopes`
    that do not hold the cursor."""
    spans: list[tuple[int, int]] = []
    classes: list[tuple[int, int]] = []
    for start, end, between, is_class in _scopes(text):
        if start <= cursor <= end:
            continue
        if is_class:
            classes.append((start, end))
        else:
            spans.extend([between, (start, end)] if between[0] >= 0 else [(start, end)])
    return _outermost(spans), _outermost(spans + classes)


_RECENT_SCOPES: list[tuple[str, tuple]] = []  # the last documents scanned, newest last (see _scopes)
_STRUCTURE_CHARS = frozenset(":()[]{}'\"#\\")  # what an edit may not type or delete (see _shifted_scopes)
_HEADER_WORD = re.compile(r"\b(?:def|class)\b")


def warm_scopes(text: str) -> None:
    """Scan the scopes of the document ``text`` before any request asks (warm-up on open): a
    request in it then finds them scanned, or moved by the edits typed since (:func:`_scopes`)."""
    _scopes(text)


def _scopes(text: str) -> tuple[tuple, ...]:
    """Every ``def`` and ``class`` of ``text`` as ``(body start, body end, parameter list span or
    (-1, -1), is a class)``, in the order their bodies end (:func:`_scan_scopes`). Typing would cost a
    scan of the whole document at every keystroke, so a document that differs from one of the last
    few scanned by an edit that cannot change its structure (:func:`_shifted_scopes`) has that one's
    scopes, moved."""
    for old, scopes in reversed(_RECENT_SCOPES):
        if old is text or old == text:
            return scopes
    for old, scopes in reversed(_RECENT_SCOPES):
        moved = _shifted_scopes(old, text, scopes)
        if moved is not None:
            break
    else:
        moved = _scan_scopes(text)
    _RECENT_SCOPES[:] = [*_RECENT_SCOPES[-2:], (text, moved)]
    return moved


def _shifted_scopes(old: str, new: str, scopes: tuple) -> tuple | None:
    """``scopes`` of ``old`` moved to ``new``, when ``new`` is ``old`` with one edit that the scan
    reads as the same tokens but one: the edit is inside one line, after its first token, types and
    deletes no bracket, colon, quote, ``#`` or backslash, does not follow a backslash or sit between
    two quotes (an escape, ``\"\"\"``), does not follow a colon with nothing after it (a header's
    one-line body), and neither version of the line has a ``def`` or ``class``. Every scope then
    stays where it was, shifted by the edit's length past it. None otherwise (the caller scans)."""
    p = common_prefix(old, new)
    q = common_suffix(old, new, p)
    typed, removed = new[p: len(new) - q], old[p: len(old) - q]
    if "\n" in typed or "\n" in removed or _STRUCTURE_CHARS.intersection(typed + removed):
        return None
    start = old.rfind("\n", 0, p) + 1
    before = old[start:p]
    after = old[len(old) - q:]
    if not before.strip(" \t") or before[-1:] == "\\" or (before[-1:] in "'\"" and after[:1] in "'\""):
        return None
    colon = before.rfind(":")
    if colon >= 0 and not before[colon + 1:].strip(" \t"):
        return None
    rest = after.split("\n", 1)[0]  # the edited line after the edit
    if _HEADER_WORD.search(before + removed + rest) or _HEADER_WORD.search(before + typed + rest):
        return None
    delta = len(new) - len(old)

    def token_end(x: int) -> int:  # a position right after a token (a colon, a "(")
        return x + delta if x > p else x

    def token_start(x: int) -> int:  # a position right before a token (a ")", a line break, a line, the end)
        return x + delta if x >= p else x

    return tuple((token_end(a), token_start(b), (token_end(between[0]), token_start(between[1])) if between[0] >= 0 else between,
                  is_class) for a, b, between, is_class in scopes)


def _scan_scopes(text: str) -> tuple[tuple, ...]:
    """The scopes of :func:`_scopes`, read in one pass of the names scanner's tokens."""
    found: list[tuple] = []
    opened: list[list] = []  # [def column, body start, one-line body, parameter list span, is a class]
    depth = 0
    line_start = 0  # offset of the current physical line
    first = True  # the next token is the first of a logical line
    cont = False  # the line follows a backslash continuation
    line_tokens = 0  # tokens on the current logical line so far
    header_col = -1  # column of a ``def`` or ``class`` whose header's colon is not reached yet
    params = [-1, -1]  # that header's parameter list: after its '(' and at its ')'
    header_class = False  # that header is a ``class`` statement's
    after_colon = False  # the last token closed a header: does code follow on its line?

    def close(pos: int, col: int) -> None:
        while opened and opened[-1][0] >= col:
            hide(*opened.pop(), pos)

    def hide(_col, start: int, _one_line, between: tuple, is_class: bool, pos: int) -> None:
        found.append((start, pos, between, is_class))

    for m in _SCOPE_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            if depth == 0:
                if after_colon:  # nothing after the header's colon: an indented block follows
                    after_colon = False
                elif opened and opened[-1][2]:  # a one-line body ends with its line
                    close(m.start(), opened[-1][0])
                first, line_tokens = True, 0
            line_start = m.end()
            continue
        if kind == "cont":
            line_start, cont = m.end(), True
            continue
        if kind == "comment":
            continue
        if depth and kind == "name" and m.group() in ("def", "class") and \
                (lead := text[line_start:m.start()].strip(" \t")) in ("", "async"):
            # a statement no bracket can hold: the bracket left open above (the line the cursor is
            # on, typed so far) ended with its line, as Python's own parser recovers
            depth, first, cont, header_col = 0, True, False, -1
            line_tokens = 1 if lead else 0  # the ``async`` before the ``def``
        if first and depth == 0 and not cont:
            col = m.start() - line_start
            close(line_start, col)  # a code line at or left of a def's column ends its body
            first = False
        cont = False
        line_tokens += 1
        if after_colon:  # code right after the header's colon: a one-line body
            after_colon = False
            opened[-1][2] = True
        if kind == "name" and m.group() in ("def", "class") and depth == 0 and (
                line_tokens == 1 or (line_tokens == 2 and text[line_start:m.start()].strip() == "async")):
            header_col = len(text[line_start:m.start()]) - len(text[line_start:m.start()].lstrip())
            params = [-1, -1]
            header_class = m.group() == "class"
        elif kind == "open":
            if depth == 0 and header_col >= 0 and params[0] < 0:
                params[0] = m.end()
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
            if depth == 0 and header_col >= 0 and params[0] >= 0 and params[1] < 0:
                params[1] = m.start()
        elif kind == "colon" and depth == 0 and header_col >= 0:
            opened.append([header_col, m.end(), False, tuple(params) if params[1] >= 0 and not header_class
                           else (-1, -1), header_class])
            header_col, after_colon = -1, True
    while opened:
        hide(*opened.pop(), len(text))
    return tuple(found)


def stubbed(text: str, spans, at: int) -> tuple[str, int, frozenset]:
    """``text`` with each of ``spans`` (sorted, not overlapping, none holding ``at``: from
    :func:`hidden_bodies` or :func:`hidden_scopes`) replaced by a stub: a body by `` ...`` (its
    line break kept), a parameter list (a span right after ``(``) by nothing. Returns ``(the
    stubbed text, where offset at is in it, the names the spans declare global or nonlocal)``: a
    skeleton that still parses where the text did, and costs a parser a fraction of the text."""
    parts: list[str] = []
    declared: set[str] = set()
    done = shift = 0
    for a, b in spans:
        parts.append(text[done:a])
        for group in _DECLARED.findall(text, a, b):
            declared.update(re.findall(r"[^\W\d]\w*", group))
        body = text[a:b]
        stub = "" if a > 0 and text[a - 1] == "(" else " ..." + ("\n" if body.endswith("\n") else "")
        parts.append(stub)
        if b <= at:
            shift += len(body) - len(stub)
        done = b
    parts.append(text[done:])
    return "".join(parts), at - shift, frozenset(declared)


def _outermost(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The spans not inside another one, sorted."""
    outer: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if not outer or a >= outer[-1][1]:
            outer.append((a, b))
    return tuple(outer)
