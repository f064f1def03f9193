"""Static callee resolution for the argument-slot constraints (signatures, imports, member names).

When the cursor is inside a call's argument list (or a completion opens one), the decoder masks
``)`` until the required arguments are present and restricts keyword names to the callee's
signature. This module supplies that static knowledge:

* :func:`engine.lexing.enclosing_call` (re-exported here) finds the innermost unclosed call around
  an offset with the tolerant scanner of :mod:`engine.lexing` (strings, comments and f-string
  fields followed; the rest of the document may be broken);
* :func:`import_map` / :func:`qualify` turn the callee text into a qualified name from the file's
  own imports (tree-sitter; nothing is imported);
* jedi (``jedi.Script`` only, never ``jedi.Interpreter``) resolves the signature statically, using
  its bundled typeshed stubs, so ``requests.get`` has explicit keyword parameters even though the
  real function takes ``**kwargs``;
* the required-argument policy table (:mod:`engine.required_arguments`) adds keyword arguments
  that lint rules require (ruff S113, S506; pylint PLW1510, PLW1514), matched on the qualified
  name so they hold even when jedi resolves nothing.

All offsets are 0-based code-point offsets into the Python ``str`` (not UTF-16 code units).
Nothing here raises on broken input: jedi failures count as "unresolved" (logged at debug level).

Cost: jedi's first call in a process takes ~0.3-1 s (stubs, inference); a new module or a
callee defined in the document costs jedi ~10-300 ms once. Answers are memoised (LRU) by the callee
and the import statements that bind it, or, for callees defined in the document, by the text
around the call, so a repeated request costs a rescan of the cursor's line, a regex pass for
import lines and dictionary lookups (~1-2 ms on a 1000-line file). :func:`warm_up` pays the first
call ahead of time; ``budget_ms=`` bounds the wait for jedi (a late answer is memoised in the
background and the request proceeds with the policy rules only).
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

from . import lexing
from .lexing import enclosing_call  # re-exported: the call at the cursor
from .required_arguments import (  # noqa: F401 - re-exported: the table's home is required_arguments
    SHORT_FORM_SAFE_VALUE,
    PolicyTable,
    RequiredArgumentsConfig,
    RequiredKeyword,
    _default_policies,
    load_pyproject_rules,
)

log = logging.getLogger(__name__)

PARAM_KINDS = ("positional_only", "positional_or_keyword", "var_positional", "keyword_only", "var_keyword")
_POSITIONAL = ("positional_only", "positional_or_keyword")
_KEYWORDABLE = ("positional_or_keyword", "keyword_only")

CACHE_SIZE = 512  # memoised jedi answers (signatures and member names)


# --------------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True)
class Param:
    """One parameter of a resolved signature. ``kind`` is one of :data:`PARAM_KINDS` (the names of
    :class:`inspect.Parameter` kinds, lower case); ``required``: no default value (always False for
    ``*args``/``**kwargs``)."""

    name: str
    kind: str
    required: bool


@dataclass(frozen=True)
class CallSpec:
    """What the argument-slot constraint needs to know about one call.

    ``callee``: the callee expression as written (``"rq.get"``). ``qualname``: qualified name from
    the file's imports (``"requests.get"``, ``"builtins.open"``); when the imports cannot name it,
    jedi's full name of the definition (``"pathlib.Path.open"``), else None.
    ``params``: the resolved parameters, None when jedi found no signature. Overloads are merged:
    parameters in order of first appearance, ``required`` only when required in every overload.
    ``keyword_names``: names allowed as ``name=`` (union over overloads); None = any (unresolved,
    or some overload takes ``**kwargs``). ``positional_max``: most positional arguments (max over
    overloads); None = unlimited (``*args``) or unresolved. ``required_positional``: positional
    parameters without default in every overload (empty when unresolved).
    ``required_keywords``: from the policy table; they hold even when unresolved, but a rule naming
    a keyword that the resolved signature does not accept is dropped.
    """

    callee: str
    qualname: str | None
    params: tuple[Param, ...] | None
    keyword_names: frozenset[str] | None
    positional_max: int | None
    required_positional: tuple[str, ...]
    required_keywords: tuple[RequiredKeyword, ...]

    def as_dict(self) -> dict:
        """JSON-ready form with the field names as keys (sets become sorted lists, tuples lists)."""
        return {
            "callee": self.callee,
            "qualname": self.qualname,
            "params": None if self.params is None else [asdict(p) for p in self.params],
            "keyword_names": None if self.keyword_names is None else sorted(self.keyword_names),
            "positional_max": self.positional_max,
            "required_positional": list(self.required_positional),
            "required_keywords": [asdict(r) for r in self.required_keywords],
        }


# --------------------------------------------------------------------------------------------------
# Imports (tree-sitter; never imports anything)

_BUILTIN_NAMES = frozenset(dir(builtins))
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


def _dotted_parts(expression: str) -> list[str] | None:
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
    parts = _dotted_parts(callee) if isinstance(callee, str) else None
    if not parts:
        return None
    root, rest = parts[0], parts[1:]
    if root in imports:
        return ".".join([imports[root], *rest])
    if root not in _BUILTIN_NAMES:
        return None
    shadows = getattr(imports, "shadows", None)
    if shadows is not None and shadows(root):
        return None
    return ".".join(["builtins", *parts])


# --------------------------------------------------------------------------------------------------
# jedi (static analysis only: jedi.Script never imports or runs the analysed modules)

_LOCK = threading.Lock()  # guards the caches (held briefly)
_JEDI_LOCK = threading.Lock()  # jedi is not thread-safe: one query at a time
_CACHE: OrderedDict[tuple, object] = OrderedDict()
_PENDING: dict[tuple, Future] = {}  # queries still running after their budget ran out
_MISS = object()
_SNIPPET_NAME = "__fsm_complete_snippet__.py"  # never written: only names the snippet's directory

_KIND_NAMES = {
    "POSITIONAL_ONLY": "positional_only",
    "POSITIONAL_OR_KEYWORD": "positional_or_keyword",
    "VAR_POSITIONAL": "var_positional",
    "KEYWORD_ONLY": "keyword_only",
    "VAR_KEYWORD": "var_keyword",
}


def _cache_get(key: tuple):
    with _LOCK:
        value = _CACHE.get(key, _MISS)
        if value is not _MISS:
            _CACHE.move_to_end(key)
        return value


def _cache_put(key: tuple, value) -> None:
    with _LOCK:
        _CACHE[key] = value
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)


def clear_cache() -> None:
    """Forget memoised jedi answers and import maps (e.g. after the environment changed)."""
    with _LOCK:
        _CACHE.clear()
    _parse_imports.cache_clear()


@lru_cache(maxsize=1)
def _environment():
    """The server's own interpreter (never one named by ``$VIRTUAL_ENV`` or found in the project):
    jedi only runs it for its helper that introspects compiled modules."""
    from jedi.api.environment import SameEnvironment

    return SameEnvironment()


@lru_cache(maxsize=32)
def _project(directory: str | None):
    import jedi

    return jedi.get_default_project(directory) if directory else jedi.Project(os.getcwd())


def _script(code: str, path: str | None):
    import jedi

    directory = os.path.dirname(os.path.abspath(path)) if path else None
    return jedi.Script(code=code, path=path, project=_project(directory), environment=_environment())


def _line_col(source: str, offset: int) -> tuple[int, int]:
    """jedi position (1-based line, 0-based code-point column) of ``offset``, splitting lines as
    parso does (``\\n``, ``\\r\\n``, ``\\r``)."""
    import parso

    lines = parso.split_lines(source[:offset])
    return len(lines), len(lines[-1])


def _has_default(param) -> bool:
    name = getattr(param, "_name", None)
    node = getattr(name, "default_node", _MISS)
    if node is not _MISS:  # source and stub parameters
        return node is not None
    signature_param = getattr(name, "_signature_param", None)
    if signature_param is not None:  # compiled (inspect) parameters
        return bool(getattr(signature_param, "has_default", False))
    text = param.to_string()
    return "=" in text.split(":", 1)[-1] if ":" in text else "=" in text


def _summarize(signature) -> tuple[tuple[Param, ...], str | None]:
    params = []
    for p in signature.params:
        kind = _KIND_NAMES.get(getattr(p.kind, "name", ""), "positional_or_keyword")
        required = kind not in ("var_positional", "var_keyword") and not _has_default(p)
        params.append(Param(p.name, kind, required))
    return tuple(params), signature.full_name


def _implementations(script, code: str, offset: int) -> tuple:
    """The signatures of the Python source that implements a callee jedi answered from a stub
    (``.pyi``): jedi may keep one of a stub's ``@overload`` variants only (``asyncio.sleep(delay,
    result)`` without ``sleep(delay)``), so a parameter the implementation gives a default is not
    required. ``offset``: just after the ``(``."""
    k = offset - 1
    while k > 0 and code[k - 1] in " \t":
        k -= 1
    line, column = _line_col(code, max(0, k - 1))
    out = []
    for definition in script.goto(line, column, follow_imports=True):
        if definition.type == "function" and str(definition.module_path or "").endswith(".py"):
            params = _source_params(str(definition.module_path), definition.line)
            if params is not None:
                out.append((params, definition.full_name))
    return tuple(out)


@lru_cache(maxsize=64)
def _source_tree(path: str):
    import ast
    from pathlib import Path

    from .text import read_source

    return ast.parse(read_source(Path(path)))


def _source_params(path: str, line: int) -> tuple[Param, ...] | None:
    """The parameters of the function defined at ``line`` (1-based) of the Python file ``path``,
    read with ``ast`` (never imported); None when there is none."""
    import ast

    try:
        tree = _source_tree(path)
    except Exception:  # unreadable or not Python: no implementation to consult
        log.debug("could not read the implementation in %s", path, exc_info=True)
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == line:
            a = node.args
            positional = a.posonlyargs + a.args
            first_default = len(positional) - len(a.defaults)
            params = [Param(p.arg, "positional_only" if i < len(a.posonlyargs) else "positional_or_keyword",
                            i < first_default) for i, p in enumerate(positional)]
            if a.vararg is not None:
                params.append(Param(a.vararg.arg, "var_positional", False))
            params += [Param(p.arg, "keyword_only", d is None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
            if a.kwarg is not None:
                params.append(Param(a.kwarg.arg, "var_keyword", False))
            return tuple(params)
    return None


def _jedi_signatures(code: str, offset: int, path: str | None):
    """``(overloads, full_name)`` of the call whose ``(`` ends at ``offset``; None if unresolved."""
    try:
        line, column = _line_col(code, offset)
        with _JEDI_LOCK:
            script = _script(code, path)
            found = script.get_signatures(line, column)
            overloads = tuple(_summarize(s) for s in found)
            if any(str(s.module_path or "").endswith(".pyi") for s in found):
                optional = {p.name for params, _ in _implementations(script, code, offset) for p in params
                            if not p.required}
                overloads = tuple((tuple(replace(p, required=p.required and p.name not in optional) for p in params),
                                   full) for params, full in overloads)
    except Exception:
        log.debug("jedi could not resolve the signature at %d in %s", offset, path, exc_info=True)
        return None
    if not overloads:
        return None
    return tuple(params for params, _ in overloads), overloads[0][1]


_OBJECT_HOOKS = ("__getattribute__", "__setattr__")  # overridden: attributes appear at run time


def _open_object(script, completions, line: int, column: int) -> bool:
    """Are the attributes of the object before the ``.`` not statically closed (issue #16, R4)?
    True for a ``__getattr__`` (a class's, or a module's, PEP 562: argparse namespaces, mocks,
    numpy), an ``__getattribute__``/``__setattr__`` that is not ``object``'s (SimpleNamespace),
    an extension module (compiled, no stub: ``dir()`` is not the whole story), or an object jedi
    cannot infer. ``line``/``column``: jedi's (1-based line, 0-based column) of the dot."""
    for c in completions:
        if c.name == "__getattr__":
            return True
        if c.name in _OBJECT_HOOKS and (c.full_name or "").rsplit(".", 1)[0] not in ("builtins.object", ""):
            return True
    inferred = script.infer(line, column)
    if not inferred:
        return True
    for name in inferred:
        if name.type == "module" and name.in_builtin_module() and not str(name.module_path or "").endswith(".pyi"):
            return True
        if name.type in ("instance", "class") and _unresolved_base(name):
            return True
    return False


def _unresolved_base(name) -> bool:
    """Does the class of ``name`` (a jedi instance or class) have a base class, anywhere in its
    MRO, that jedi cannot infer (``from .util import Base`` out of reach, a base made at run
    time)? Its attributes are then unknown. Uses jedi's value API; any surprise counts as True."""
    try:
        for value in name._name.infer():
            cls = getattr(value, "class_value", value)
            for klass in [cls, *cls.py__mro__()]:
                bases = getattr(klass, "py__bases__", None)
                if bases is None:
                    continue
                for base in bases():
                    if not base.infer():
                        return True
    except Exception:
        log.debug("could not walk the bases of %s", name, exc_info=True)
        return True
    return False


_WORD = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_DOT_NAME = re.compile(r"\.[ \t]*([A-Za-z_]\w*)")
_SETS_ATTRIBUTES = re.compile(r"\b(?:setattr|vars)[ \t]*\(|\.__dict__\b")


def _instance_hints(code: str, script, completions, line: int, column: int) -> frozenset[str] | None:
    """Attributes an instance (or class) of a Python class may get from outside its class body:
    every name written in the document, after a ``.`` or not (``obj.extra = 1`` anywhere, a
    subclass's class attribute, ``type(name, bases, {"attr": ...})``: R4's hints).
    Empty for objects of builtin types and classes with ``__slots__`` (closed); None (open) when
    the document sets attributes by name (``setattr``, ``vars()``, ``__dict__``) or the class is a
    base of another class in the document (a mixin: ``self.assertEqual`` comes with the subclass)."""
    if any(c.name == "__slots__" for c in completions):
        return frozenset()
    inferred = script.infer(line, column)
    kinds = [(n.type, n.module_name) for n in inferred]
    if all(module == "builtins" or kind not in ("instance", "class") for kind, module in kinds):
        return frozenset()
    if _SETS_ATTRIBUTES.search(code):
        return None
    for n in inferred:  # a mixin: the classes built on it bring attributes (``self.assertEqual``)
        if n.type in ("instance", "class") and re.search(
                r"\bclass[ \t]+\w+[ \t]*\([^:]*\b" + re.escape(n.name) + r"\b", code):
            return None
    return frozenset(_DOT_NAME.findall(code)) | frozenset(_WORD.findall(code))


def _jedi_members(code: str, offset: int, path: str | None) -> frozenset[str] | None:
    """Attribute names after the ``.`` at ``offset - 1``; None when unresolved or open (see
    :func:`_open_object`)."""
    try:
        line, column = _line_col(code, offset)
        with _JEDI_LOCK:
            script = _script(code, path)
            completions = script.complete(line, column)
            if _open_object(script, completions, line, max(0, column - 1)):
                return None
            hints = _instance_hints(code, script, completions, line, max(0, column - 1))
            if hints is None:
                return None
            names = frozenset(c.name for c in completions) | hints
    except Exception:
        log.debug("jedi could not list members at %d in %s", offset, path, exc_info=True)
        return None
    return names or None


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _line_end(source: str, offset: int) -> int:
    newline = source.find("\n", offset)
    return len(source) if newline == -1 else newline


@lru_cache(maxsize=1)
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsm-complete-jedi")


def _finish(key: tuple, run, query: tuple):
    try:
        result = run(*query)
        _cache_put(key, result)
        return result
    finally:
        with _LOCK:
            _PENDING.pop(key, None)


def _jedi_request(kind: str, source: str, expression: str, anchor: int, path: str | None,
                  imports: ImportMap, run, budget_ms: float | None, document: bool = True):
    """Memoised jedi query about ``expression`` whose ``(`` or ``.`` is at ``anchor``.

    A dotted name rooted in an import (or a builtin) is asked about in a two-line snippet: the
    import statements binding the root, then the expression, keyed by that snippet and the file's
    directory. Anything else (local functions, methods of local objects) needs the document; it is
    keyed by the text before ``anchor`` and after the anchor's line, so typing the arguments on
    that line keeps hitting the cache.

    ``budget_ms``: None waits for jedi. Otherwise an answer not ready in time counts as
    unresolved (None) for this call while jedi finishes on a background thread and memoises it
    for the next one. ``document=False``: a query that needs the whole document is answered only
    from the cache (None otherwise, nothing started): parsing a large file costs jedi 0.1-1 s."""
    parts = _dotted_parts(expression)
    directory = os.path.dirname(os.path.abspath(path)) if path else None
    if parts and parts[0] in imports:
        code = "\n".join(imports.statements.get(parts[0], ())) + "\n" + ".".join(parts) + kind
        snippet_path = os.path.join(directory, _SNIPPET_NAME) if directory else None
        key = (kind, "snippet", code, directory)
        query = (code, len(code), snippet_path)
    elif parts and parts[0] in _BUILTIN_NAMES and not imports.shadows(parts[0]):
        code = ".".join(parts) + kind
        key = (kind, "snippet", code, None)
        query = (code, len(code), None)
    else:
        key = (kind, "document", path, expression, _digest(source[:anchor]),
               _digest(source[_line_end(source, anchor):]))
        query = (source, anchor + 1, path)
    cached = _cache_get(key)
    if cached is not _MISS:
        return cached
    if not document and key[1] == "document":
        return None
    if budget_ms is None:
        result = run(*query)
        _cache_put(key, result)
        return result
    with _LOCK:
        future = _PENDING.get(key)
        if future is None:
            future = _PENDING[key] = _executor().submit(_finish, key, run, query)
    try:
        return future.result(timeout=max(0.0, budget_ms) / 1000)
    except FutureTimeout:
        log.debug("jedi answer for %r not ready within %s ms; unresolved for now", expression, budget_ms)
        return None


def _merge(overloads: tuple[tuple[Param, ...], ...]):
    """keyword names, positional max, required positional, merged params, consistent positions."""
    var_keyword = any(p.kind == "var_keyword" for ps in overloads for p in ps)
    keyword_names = None if var_keyword else frozenset(
        p.name for ps in overloads for p in ps if p.kind in _KEYWORDABLE)
    if any(p.kind == "var_positional" for ps in overloads for p in ps):
        positional_max = None
    else:
        positional_max = max(sum(p.kind in _POSITIONAL for p in ps) for ps in overloads)
    required_sets = [{p.name for p in ps if p.required and p.kind in _POSITIONAL} for ps in overloads]
    common = set.intersection(*required_sets)
    required_positional = tuple(p.name for p in overloads[0] if p.name in common)
    merged: dict[str, Param] = {}
    for ps in overloads:
        for p in ps:
            merged.setdefault(p.name, p)
    params = tuple(
        replace(p, required=all(any(q.name == p.name and q.required for q in ps) for ps in overloads))
        for p in merged.values())
    positions: dict[str, int | None] = {}
    for ps in overloads:
        for index, p in enumerate(ps):
            same = p.kind == "positional_or_keyword" and positions.get(p.name, index) == index
            positions[p.name] = index if same else None
    return keyword_names, positional_max, required_positional, params, positions


_FIELDS_OPTIONAL = frozenset({"ast", "_ast"})  # AST node classes: every field may be omitted (set later)


def _spec(source: str, callee: str, paren: int, path: str | None, policies: PolicyTable | None,
          budget_ms: float | None, document: bool = True) -> CallSpec:
    imports = import_map(source)
    qualname = qualify(callee, imports)
    resolved = _jedi_request("(", source, callee, paren, path, imports, _jedi_signatures, budget_ms, document)
    table = policies if policies is not None else _default_policies()
    aliases = imports.aliases()
    rules = table.required_for(qualname, aliases)
    if resolved is None:
        return CallSpec(callee, qualname, None, None, None, (), rules)
    overloads, full_name = resolved
    if qualname is None:
        qualname = full_name
        rules = table.required_for(qualname, aliases)
    elif not rules and full_name and full_name != qualname:
        rules = table.required_for(full_name, aliases)
    keyword_names, positional_max, required_positional, params, positions = _merge(overloads)
    if (full_name or qualname or "").split(".")[0] in _FIELDS_OPTIONAL:
        required_positional = ()  # typeshed requires the fields; CPython's constructors do not (< 3.13 silently)
    kept = []
    for rule in rules:
        if keyword_names is not None and rule.name not in keyword_names:
            log.debug("dropping %s rule %s=: %s takes no such keyword", rule.rule, rule.name, qualname)
            continue
        if rule.position is None and rule.rule == "pyproject" and positions.get(rule.name) is not None:
            rule = replace(rule, position=positions[rule.name])
        kept.append(rule)
    return CallSpec(callee, qualname, params, keyword_names, positional_max, required_positional, tuple(kept))


# --------------------------------------------------------------------------------------------------
# Public entry points


def resolve_call(source: str, offset: int, path: str | None = None, policies: PolicyTable | None = None,
                 *, budget_ms: float | None = None) -> CallSpec | None:
    """The call whose argument list contains ``offset`` (0-based code points, e.g. right after
    ``(`` or ``, ``), resolved statically; None when ``offset`` is not inside a call. ``path``: the
    document's file path (for imports of modules beside it); ``policies``: the rule table
    (default profile when None). ``budget_ms``: most time to wait for jedi (None: no limit); a late
    answer leaves the spec unresolved (``params`` None, policy rules still set) and is memoised in
    the background for the next request. Never raises."""
    try:
        found = enclosing_call(source, offset)
        if found is None:
            return None
        return _spec(source, found[0], found[1], path, policies, budget_ms)
    except Exception:
        log.debug("resolve_call failed", exc_info=True)
        return None


def resolve_callee(source: str, paren_offset: int, path: str | None = None, policies: PolicyTable | None = None,
                   *, budget_ms: float | None = None, document: bool = True) -> CallSpec | None:
    """Like :func:`resolve_call` for a call the completion itself opens: ``source`` is the document
    prefix plus the completion so far, ending right after the ``(`` at ``paren_offset``. None when
    that ``(`` is not a call (``def f(``, a tuple, inside a string or comment). ``document=False``
    (the decode loop): a callee that only the whole document can resolve (a local function,
    ``self.method``) is resolved from the cache or left unresolved (policy rules only), so that no
    decode step waits for jedi to parse the file. Never raises."""
    try:
        if not 0 <= paren_offset < len(source) or source[paren_offset] != "(":
            return None
        sc = lexing.scan(source[:paren_offset])
        if sc.context in ("string", "comment"):
            return None
        callee = lexing.callee_before(sc.text, paren_offset, sc)
        if callee is None:
            return None
        return _spec(source, callee, paren_offset, path, policies, budget_ms, document)
    except Exception:
        log.debug("resolve_callee failed", exc_info=True)
        return None


def member_names(source: str, offset: int, path: str | None = None, *, budget_ms: float | None = None
                 ) -> frozenset[str] | None:
    """Attribute names of the object before the ``.`` at the cursor (``offset`` right after
    ``name.`` or inside ``name.partial``), as jedi resolves it statically (the partial name does not
    filter). None when jedi resolves nothing (never a guess), the cursor is not after a ``.``, or
    the answer is not ready within ``budget_ms`` (see :func:`resolve_call`). Never raises."""
    try:
        offset = max(0, min(int(offset), len(source)))
        k = offset
        while k > 0 and (source[k - 1].isalnum() or source[k - 1] == "_"):
            k -= 1
        if k == 0 or source[k - 1] != ".":
            return None
        dot = k - 1
        sc = lexing.scan(source[:dot])
        if sc.context in ("string", "comment"):
            return None
        expression = lexing.callee_before(sc.text, dot, sc)
        if expression is None:
            return None
        imports = import_map(source)
        return _jedi_request(".", source, expression, dot, path, imports, _jedi_members, budget_ms)
    except Exception:
        log.debug("member_names failed", exc_info=True)
        return None


def warm_up() -> None:
    """Pay jedi's first-call cost (~0.3-0.8 s: stubs, helper process) ahead of the first request;
    call from a background thread at startup. Never raises."""
    try:
        _jedi_signatures("import os\nos.path.join(", len("import os\nos.path.join("), None)
    except Exception:  # pragma: no cover - defensive
        log.debug("jedi warm-up failed", exc_info=True)
