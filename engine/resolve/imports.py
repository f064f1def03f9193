"""The file's imports, read with tree-sitter (never imports anything).

:func:`import_map` gives local name -> qualified name from the ``import``/``from ... import``
statements; :func:`qualify` turns a dotted callee as written (``rq.get``) into a qualified name
(``requests.get``). Offsets are 0-based code points. Nothing here raises on broken input.
"""

from __future__ import annotations

import builtins
import keyword
import logging
import re
from collections.abc import Mapping
from functools import lru_cache

log = logging.getLogger(__name__)

BUILTIN_NAMES = frozenset(dir(builtins))
_IMPORT_START = re.compile(r"^[ \t]*(?:import|from)[ \t\\]", re.MULTILINE)
_MAX_IMPORT_LINES = 64  # a parenthesised import list longer than this is cut (and then skipped)


class ImportMap(dict):
    """``local name -> qualified name`` from the file's imports (``{"rq": "requests",
    "get": "requests.get", "mod": ".mod"}``; relative imports keep their leading dots).

    ``statements``: local name -> the import statements that bind it (canonical text, e.g.
    ``"import requests as rq"``). ``star``: modules imported with ``*``. :meth:`shadows` tells
    whether the file binds a name itself."""

    def __init__(self, entries: Mapping[str, str] | None = None, statements: Mapping | None = None,
                 star: tuple[str, ...] = (), source: str = ""):
        super().__init__(entries or {})
        self.statements: dict[str, tuple[str, ...]] = dict(statements or {})
        self.star = tuple(star)
        self._source = source
        self._shadows: dict[str, bool] = {}

    def shadows(self, name: str) -> bool:
        """Whether the document binds ``name`` anywhere by ``def``/``class``, assignment (also
        annotated, augmented, tuple, walrus), ``for``/``with``/``except ... as``, ``global``,
        ``lambda`` or ``def`` parameters: regexes over the lines that mention ``name``, so it
        over-approximates (a keyword argument ``f(name=1)`` or a comment counts too); the price is
        only that jedi reads the whole document instead of a two-line snippet."""
        if name not in self._shadows:
            self._shadows[name] = _binds(self._source, name)
        return self._shadows[name]

    def aliases(self) -> dict[str, str]:
        """Qualified name -> local name (the first binding of each; ``""`` for a module imported
        with ``*``), the ``alias_of_module`` of :meth:`PolicyTable.required_for`."""
        out: dict[str, str] = {}
        for local, qualified in self.items():
            out.setdefault(qualified, local)
        for module in self.star:
            out.setdefault(module, "")
        return out


@lru_cache(maxsize=64)
def _binding_patterns(name: str) -> tuple[re.Pattern, re.Pattern]:
    n = re.escape(name)
    occurrence = re.compile(rf"(?<![\w.]){n}\b")
    binding = re.compile(
        rf"\b(?:def|class)\s+{n}\b"
        rf"|\bas\s+{n}\b"
        rf"|\b(?:global|nonlocal)\b.*(?<![\w.]){n}\b"
        rf"|\bfor\b.*(?<![\w.]){n}\b.*\bin\b"
        rf"|\blambda\b[^:]*(?<![\w.]){n}\b"
        # open = / open: T = / open += (not an annotation `x: open = `)
        rf"|(?<![\w.])(?<!:)(?<!:\s)(?<!\|)(?<!\|\s){n}\s*(?::[^=]*)?(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)"
        rf"|(?<![\w.=])(?<!:)(?<![:=]\s){n}\s*,[^=\]]*?(?<![=!<>])=(?!=)"  # open, x = ...
        rf"|,\s*{n}\s*(?:,[^=\]]*?)?(?<![=!<>])=(?!=)"  # x, open = ...
        rf"|\bdef\s+\w+\s*\((?:[^)]*,)?\s*\*{{0,2}}{n}\s*(?:[:=,)]|$)"  # a parameter
        rf"|^\s*\*{{0,2}}{n}\s*(?:[:,)]|=(?!=)|$)",  # a parameter on its own line
        re.MULTILINE,
    )
    return occurrence, binding


def _binds(source: str, name: str) -> bool:
    """Whether a line holding ``name`` binds it (see :meth:`ImportMap.shadows`)."""
    occurrence, binding = _binding_patterns(name)
    last_line = -1
    for m in occurrence.finditer(source):
        line_start = source.rfind("\n", 0, m.start()) + 1
        if line_start == last_line:
            continue
        last_line = line_start
        line_end = source.find("\n", m.end())
        if binding.search(source, line_start, len(source) if line_end == -1 else line_end):
            return True
    return False


@lru_cache(maxsize=1)
def _ts():
    import tree_sitter_python
    from tree_sitter import Language, Parser, Query

    language = Language(tree_sitter_python.language())
    return Parser(language), Query(language, "[(import_statement) (import_from_statement)] @imp")


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _import_statements(source: str) -> str:
    """The import statements of ``source`` (lines starting with ``import``/``from`` at any
    indentation, plus their parenthesised or backslash continuation lines), dedented, one per
    line: all that :func:`import_map` parses, so the parse costs nothing on large files."""
    out = []
    for m in _IMPORT_START.finditer(source):
        begin = m.start() + len(m.group()) - len(m.group().lstrip(" \t"))
        end = begin
        for _ in range(_MAX_IMPORT_LINES):
            newline = source.find("\n", end)
            end = len(source) if newline == -1 else newline
            text = source[begin:end]
            if newline == -1 or not (text.count("(") > text.count(")") or text.rstrip().endswith("\\")):
                break
            end += 1
        out.append(source[begin:end])
    return "\n".join(out)


@lru_cache(maxsize=32)
def _parse_imports(statements: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]], tuple[str, ...]]:
    from tree_sitter import QueryCursor

    parser, imports_query = _ts()
    tree = parser.parse(statements.encode("utf-8", "surrogatepass"))
    names: dict[str, str] = {}
    bindings: dict[str, list[str]] = {}
    star: list[str] = []
    nodes = QueryCursor(imports_query).captures(tree.root_node).get("imp", [])
    for node in sorted(nodes, key=lambda n: n.start_byte):
        if node.has_error:
            continue
        if node.type == "import_statement":
            for item in node.children_by_field_name("name"):
                if item.type == "aliased_import":
                    dotted, alias = _text(item.child_by_field_name("name")), _text(item.child_by_field_name("alias"))
                    local, qualified, stmt = alias, dotted, f"import {dotted} as {alias}"
                else:
                    dotted = _text(item)
                    local = qualified = dotted.split(".")[0]
                    stmt = f"import {dotted}"
                names[local] = qualified
                bindings.setdefault(local, []).append(stmt)
            continue
        module_node = node.child_by_field_name("module_name")
        if module_node is None:
            continue
        module = "".join(_text(module_node).split())
        if any(child.type == "wildcard_import" for child in node.children):
            star.append(module)
            continue
        for item in node.children_by_field_name("name"):
            if item.type == "aliased_import":
                name, local = _text(item.child_by_field_name("name")), _text(item.child_by_field_name("alias"))
                stmt = f"from {module} import {name} as {local}"
            else:
                name = local = _text(item)
                stmt = f"from {module} import {name}"
            names[local] = f"{module}{name}" if module.endswith(".") else f"{module}.{name}"
            bindings.setdefault(local, []).append(stmt)
    return names, {name: tuple(stmts) for name, stmts in bindings.items()}, tuple(star)


def import_map(source: str) -> ImportMap:
    """Local name -> qualified name from the file's ``import``/``from ... import`` statements at
    any indentation (later bindings win), parsed with tree-sitter; nothing is imported.
    ``import a.b`` binds ``a``; ``from . import m`` gives ``".m"``; ``*`` imports are listed in
    ``.star``; statements with syntax errors are skipped. Only lines that start with ``import`` or
    ``from`` are parsed (memoised by their text), so ``x = 1; import y`` is missed and an import
    line inside a docstring counts. Never raises (returns an empty map)."""
    try:
        names, statements, star = _parse_imports(_import_statements(source))
        return ImportMap(names, statements, star, source)
    except Exception:
        log.debug("import_map failed", exc_info=True)
        return ImportMap(source=source)


def dotted_parts(expression: str) -> list[str] | None:
    """The names of a dotted expression (``"os . path"`` -> ``["os", "path"]``); None when it is
    not one (a call, a subscript, a keyword)."""
    parts = [p.strip() for p in expression.split(".")]
    if parts and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return parts
    return None


def qualify(callee: str, imports: Mapping[str, str]) -> str | None:
    """Qualified name of a dotted callee from the file's imports: ``"rq.get"`` -> ``"requests.get"``
    (``import requests as rq``), ``"get"`` -> ``"requests.get"`` (``from requests import get``),
    ``"open"`` -> ``"builtins.open"`` unless the file binds ``open`` itself (``imports.shadows``
    of an :class:`ImportMap`; a plain dict is taken as complete). None for anything else (names
    defined in the file, ``Path(...).open``)."""
    parts = dotted_parts(callee) if isinstance(callee, str) else None
    if not parts:
        return None
    root, rest = parts[0], parts[1:]
    if root in imports:
        return ".".join([imports[root], *rest])
    if root not in BUILTIN_NAMES:
        return None
    shadows = getattr(imports, "shadows", None)
    if shadows is not None and shadows(root):
        return None
    return ".".join(["builtins", *parts])


def clear_cache() -> None:
    """Forget the memoised import parses."""
    _parse_imports.cache_clear()
