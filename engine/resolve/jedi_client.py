"""jedi, the static analyser behind signatures and member names (``jedi.Script`` only: it never
imports or runs the analysed modules).

:func:`jedi_request` memoises answers (LRU, :data:`CACHE_SIZE`) keyed by a two-line snippet (a
callee rooted in an import or a builtin) or by the text around the anchor (anything else), and
bounds the wait with ``budget_ms`` (a late answer is memoised by a background thread). The decode
loop asks with ``cached_only``: a miss is queued, and :func:`resolve_deferred` runs the queue when
the engine is idle (its warm-ups). :func:`jedi_signatures` and :func:`jedi_members` are the two queries. jedi failures count as
"unresolved" (None, logged at debug level); nothing here raises on broken input. Positions are
0-based code-point offsets; jedi's own are (1-based line, 0-based column).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import lru_cache

from . import imports as _imports
from .imports import BUILTIN_NAMES, ImportMap, dotted_parts

log = logging.getLogger(__name__)

PARAM_KINDS = ("positional_only", "positional_or_keyword", "var_positional", "keyword_only", "var_keyword")
CACHE_SIZE = 512  # memoised jedi answers (signatures and member names)
DEFERRED_SIZE = 128  # snippet queries the decode loop missed or a document's warm-up found, waiting for an idle moment


@dataclass(frozen=True)
class Param:
    """One parameter of a resolved signature. ``kind`` is one of :data:`PARAM_KINDS` (the names of
    :class:`inspect.Parameter` kinds, lower case); ``required``: no default value (always False for
    ``*args``/``**kwargs``)."""

    name: str
    kind: str
    required: bool


_LOCK = threading.Lock()  # guards the caches (held briefly)
_JEDI_LOCK = threading.Lock()  # jedi is not thread-safe: one query at a time
_CACHE: OrderedDict[tuple, object] = OrderedDict()
_PENDING: dict[tuple, Future] = {}  # queries still running after their budget ran out
_DEFERRED: OrderedDict[tuple, tuple] = OrderedDict()  # key -> (run, query): for resolve_deferred
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
    """Forget memoised jedi answers, queued queries and import maps (e.g. after the environment changed)."""
    with _LOCK:
        _CACHE.clear()
        _DEFERRED.clear()
    _imports.clear_cache()


def _defer(key: tuple, run, query: tuple) -> None:
    with _LOCK:
        _DEFERRED[key] = (run, query)
        _DEFERRED.move_to_end(key)
        while len(_DEFERRED) > DEFERRED_SIZE:
            _DEFERRED.popitem(last=False)  # the oldest: a document the user has left, most likely


def defer_signatures(expression: str, path: str | None, imports: ImportMap) -> bool:
    """Queue the signature query about a call of ``expression`` for :func:`resolve_deferred` (a
    callee rooted in an import or a builtin only: the others need the whole document); False when
    it is answered already or needs the document."""
    snippet = _snippet("(", expression, path, imports)
    if snippet is None:
        return False
    key, query = snippet
    if _cache_get(key) is not _MISS:
        return False
    _defer(key, jedi_signatures, query)
    return True


def deferred() -> int:
    """Queries waiting for :func:`resolve_deferred`."""
    with _LOCK:
        return len(_DEFERRED)


def resolve_deferred(should_stop, most: int | None = None) -> int:
    """Run the queued jedi queries (the newest first, at most ``most``; None: all) and memoise their
    answers, checking ``should_stop()`` before each (a request is waiting: it then waits for one
    query at most, 5-300 ms). Returns how many ran. Never raises (a failed query counts as unresolved)."""
    done = 0
    while (most is None or done < most) and not should_stop():
        with _LOCK:
            if not _DEFERRED:
                break
            key, (run, query) = _DEFERRED.popitem(last=True)
        if _cache_get(key) is _MISS:
            try:
                _cache_put(key, run(*query))
            except Exception:  # the queries catch their own; nothing may escape a warm-up
                log.debug("deferred jedi query failed", exc_info=True)
            done += 1
    return done


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


def warm_parse(source: str, path: str | None) -> bool:
    """Have jedi parse the document ``source`` of file ``path`` now (off the request path: an
    editor just opened it), so that the first query about it finds the parse in parso's cache,
    which is keyed by path (0.1-1 s for a large file otherwise). Nothing for a document without a
    path. Returns whether it parsed; never raises."""
    if not path:
        return False
    try:
        with _JEDI_LOCK:
            _script(source, path)
        return True
    except Exception:  # noqa: BLE001 - a warm-up must never fail the server
        log.debug("jedi warm-up of %s failed", path, exc_info=True)
        return False


def warm_jedi() -> bool:
    """Have jedi build its first state now (its import, the builtins' stubs, the helper process it
    runs compiled modules in): the first query pays ~0.3 s for them otherwise. Never raises."""
    try:
        with _JEDI_LOCK:
            _script("print(", None).get_signatures(1, 6)
        return True
    except Exception:  # noqa: BLE001 - a warm-up must never fail the server
        log.debug("jedi warm-up failed", exc_info=True)
        return False


SKELETON_CHARS = 20_000  # a larger document is shown to jedi as its skeleton (see _view)


def _view(code: str, offset: int) -> tuple[str, int]:
    """What jedi parses to answer a query at ``offset`` in ``code``: the document itself, or above
    :data:`SKELETON_CHARS` its skeleton (:func:`engine.monitors.name_table.stubbed`): the bodies of
    the functions that do not enclose ``offset`` become ``...``; class bodies and every header,
    parameters included, stay. Parsing is most of a query's cost on a large file (parso: 0.1-1 s for 200 kB); what a
    skeleton loses (a return type inferred from a hidden body) leaves a callee unresolved, which no
    monitor enforces. For signatures only. Returns ``(text, offset in it)``."""
    if len(code) <= SKELETON_CHARS:
        return code, offset
    from ..monitors.name_table import hidden_bodies, stubbed

    bodies = [(a, b) for a, b in hidden_bodies(code, offset)
              if not a <= offset <= b and code[a - 1: a] != "("]  # parameter lists stay: they are the signatures
    text, at, _ = stubbed(code, bodies, offset)
    return text, at


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


def _source_tree(path: str):
    """The ``ast`` of the Python file ``path``, parsed again once the file changes on disk."""
    return _parsed_source(path, os.stat(path).st_mtime_ns)


@lru_cache(maxsize=64)
def _parsed_source(path: str, mtime_ns: int):
    import ast
    from pathlib import Path

    from ..text import read_source

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


def jedi_signatures(code: str, offset: int, path: str | None):
    """``(overloads, full_name)`` of the call whose ``(`` ends at ``offset``; None if unresolved."""
    try:
        code, offset = _view(code, offset)
        line, column = _line_col(code, offset)
        with _JEDI_LOCK:
            script = _script(code, path)
            found = script.get_signatures(line, column)
            if any(_constructor_in_doubt(s) for s in found):
                return None
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


_CONSTRUCTORS = ("__init__", "__new__")


def _defines(klass, name: str) -> bool:
    """Does the jedi class value ``klass`` define ``name`` in its own body (not inherited)?"""
    own = next(iter(klass.get_filters()), None)
    return bool(own is not None and own.get(name))


def _is_object(klass) -> bool:
    return klass.py__name__() == "object" and klass.get_root_context().is_builtins_module()


def _opaque(klass) -> bool:
    """Can the jedi class value ``klass`` get a constructor jedi does not read? A decorator (a
    dataclass's generated ``__init__``, attrs), a metaclass (its ``__call__``), a base jedi cannot
    infer, or no source at all."""
    node = getattr(klass, "tree_node", None)
    if node is None or node.type != "classdef":
        return True
    arglist = node.get_super_arglist()
    if node.get_decorators() or (arglist is not None and "metaclass" in arglist.get_code()):
        return True
    return any(not base.infer() for base in klass.py__bases__())


def _constructor_in_doubt(signature) -> bool:
    """May the ``__init__``/``__new__`` jedi read for a class's signature not be the one Python
    calls? jedi lists a class's bases depth first, not in C3 order (Python's MRO, "The Python 2.3
    Method Resolution Order"), so with multiple inheritance it can reach ``object`` or a shared
    base before a later base that defines the constructor: sympy's ``Matrix(2, 2, [1, 2, 3, 5])``
    came out as ``MutableDenseMatrix()`` (``object.__new__``, while ``MutableRepMatrix.__new__``
    takes ``*args``), and the slot monitor refused real code. True when the hierarchy has multiple
    inheritance and a constructor the class does not define itself comes from ``object`` or from
    one of several defining classes; and when it comes from ``object`` while a class of the
    hierarchy may get its constructor where jedi does not look (:func:`_opaque`: a dataclass
    base, a metaclass's ``__call__``, a base jedi cannot infer). The signature is then left
    unresolved (sound: nothing refused). Any surprise in jedi's value API counts as True."""
    if signature.type != "class":
        return False
    try:
        klass = signature._signature.value
        mro = [k for k in klass.py__mro__() if hasattr(k, "get_filters")]
        function = getattr(signature._signature, "_function_value", None)
        chosen = getattr(function, "class_context", None)
        from_object = chosen is not None and chosen.get_root_context().is_builtins_module() \
            and chosen.name.string_name == "object"
        if from_object and any(_opaque(k) for k in mro if not _is_object(k)):
            return True
        if not any(len(list(k.py__bases__())) > 1 for k in mro if hasattr(k, "py__bases__")):
            return False
        if any(_defines(klass, name) for name in _CONSTRUCTORS):
            return False
        definers = [k for k in mro if not _is_object(k) and any(_defines(k, n) for n in _CONSTRUCTORS)]
        return bool(definers) and (from_object or len(definers) > 1)
    except Exception:
        log.debug("could not check the constructor of %s", signature, exc_info=True)
        return True


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


def jedi_members(code: str, offset: int, path: str | None) -> frozenset[str] | None:
    """Attribute names after the ``.`` at ``offset - 1``; None when unresolved or open (see
    :func:`_open_object`). jedi reads the whole document: a skeleton (:func:`_view`) would hide
    the attributes that methods set (a class with ``__slots__`` is closed to the rest)."""
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


_OFFLOAD = None  # (run, *query) -> Future | None: the jedi worker's submit while it is on (engine.resolve.worker)


def offload_to(submit) -> None:
    """Budgeted queries go to ``submit(run, *query)`` (a Future, or None: run here after all) from now
    on; None: on this process's jedi thread. Set by :mod:`engine.resolve.worker`."""
    global _OFFLOAD
    _OFFLOAD = submit


def _submit(key: tuple, run, query: tuple) -> Future:
    """Start ``run(*query)`` off the caller's thread, memoised under ``key`` when it ends: in the jedi
    worker process when it is on (:func:`offload_to`, :mod:`engine.resolve.worker`: no GIL shared with
    the server's decoding), else on this process's jedi thread."""
    offload = _OFFLOAD
    future = offload(run, *query) if offload is not None else None
    if future is None:
        return _executor().submit(_finish, key, run, query)

    def done(f: Future) -> None:
        with _LOCK:
            _PENDING.pop(key, None)
        if not f.cancelled() and f.exception() is None:
            _cache_put(key, f.result())
        elif not f.cancelled():
            log.debug("the jedi worker's query failed", exc_info=f.exception())

    future.add_done_callback(done)
    return future


def _finish(key: tuple, run, query: tuple):
    try:
        result = run(*query)
        _cache_put(key, result)
        return result
    finally:
        with _LOCK:
            _PENDING.pop(key, None)


def _snippet(kind: str, expression: str, path: str | None, imports: ImportMap):
    """``(cache key, jedi query arguments)`` of the two-line snippet that asks about ``expression``
    (rooted in an import or a builtin); None when only the document can answer."""
    parts = dotted_parts(expression)
    if parts and parts[0] in imports:
        directory = os.path.dirname(os.path.abspath(path)) if path else None
        code = "\n".join(imports.statements.get(parts[0], ())) + "\n" + ".".join(parts) + kind
        snippet_path = os.path.join(directory, _SNIPPET_NAME) if directory else None
        stamp = _local_module_stamp(directory, imports[parts[0]]) if directory else None
        return (kind, "snippet", code, directory, stamp), (code, len(code), snippet_path)
    if parts and parts[0] in BUILTIN_NAMES and not imports.shadows(parts[0]):
        code = ".".join(parts) + kind
        return (kind, "snippet", code, None), (code, len(code), None)
    return None


def _local_module_stamp(directory: str, qualified: str) -> tuple[str, int] | None:
    """``(file, st_mtime_ns)`` of the project module beside the document that the import of
    ``qualified`` reads (``helpers`` -> ``directory/helpers.py`` or ``directory/helpers/__init__.py``;
    ``pkg.name`` -> the longest of ``pkg/name``, ``pkg`` that exists); None for a module found
    elsewhere (the standard library, site-packages: they do not change while the server runs). Part
    of a snippet's cache key, so that jedi's answer about a project module is asked again once that
    file is saved with new names (field report D07)."""
    parts = [p for p in qualified.lstrip(".").split(".") if p]
    for n in range(len(parts), 0, -1):
        base = os.path.join(directory, *parts[:n])
        for file in (base + ".py", os.path.join(base, "__init__.py")):
            try:
                return file, os.stat(file).st_mtime_ns
            except OSError:
                continue
    return None


def _query(kind: str, source: str, expression: str, anchor: int, path: str | None, imports: ImportMap):
    """``(cache key, jedi query arguments)`` for :func:`jedi_request` (see there)."""
    snippet = _snippet(kind, expression, path, imports)
    if snippet is not None:
        return snippet
    key = (kind, "document", path, expression, _digest(source[:anchor]), _digest(source[_line_end(source, anchor):]))
    return key, (source, anchor + 1, path)


def jedi_request(kind: str, source: str, expression: str, anchor: int, path: str | None,
                  imports: ImportMap, run, budget_ms: float | None, cached_only: bool = False):
    """Memoised jedi query about ``expression`` whose ``(`` or ``.`` is at ``anchor``.

    A dotted name rooted in an import (or a builtin) is asked about in a two-line snippet: the
    import statements binding the root, then the expression, keyed by that snippet and the file's
    directory. Anything else (local functions, methods of local objects) needs the document; it is
    keyed by the text before ``anchor`` and after the anchor's line, so typing the arguments on
    that line keeps hitting the cache.

    ``budget_ms``: None waits for jedi. Otherwise an answer not ready in time counts as
    unresolved (None) for this call while jedi finishes on a background thread and memoises it
    for the next one. ``cached_only`` (the decode loop): answered from the cache only, None
    otherwise: no decode step waits for jedi (a snippet costs it 5-25 ms, 0.1-0.3 s the first time
    a module's stub is read; a document 0.1-1 s). A snippet missed this way is queued for
    :func:`resolve_deferred`, which the engine's warm-ups run while the editor is idle."""
    key, query = _query(kind, source, expression, anchor, path, imports)
    cached = _cache_get(key)
    if cached is not _MISS:
        return cached
    if cached_only:
        if key[1] == "snippet":
            _defer(key, run, query)
        return None
    if budget_ms is None:
        result = run(*query)
        _cache_put(key, result)
        return result
    with _LOCK:
        future = _PENDING.get(key)
        if future is None:
            future = _PENDING[key] = _submit(key, run, query)
    try:
        return future.result(timeout=max(0.0, budget_ms) / 1000)
    except FutureTimeout:
        log.debug("jedi answer for %r not ready within %s ms; unresolved for now", expression, budget_ms)
        return None
