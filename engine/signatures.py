"""Static callee resolution for the argument-slot constraints (signatures, imports, member names).

When the cursor is inside a call's argument list (or a completion opens one), the decoder masks
``)`` until the required arguments are present and restricts keyword names to the callee's
signature. This module supplies that static knowledge:

* :func:`engine.lexing.enclosing_call` (re-exported here) finds the innermost unclosed call around
  an offset with the tolerant scanner of :mod:`engine.lexing` (strings, comments and f-string
  fields followed; the rest of the document may be broken);
* :func:`import_map` / :func:`qualify` (:mod:`engine.resolve.imports`, re-exported here) turn the
  callee text into a qualified name from the file's own imports (tree-sitter; nothing is imported);
* jedi (:mod:`engine.resolve.jedi_client`; ``jedi.Script`` only, never ``jedi.Interpreter``)
  resolves the signature statically, using
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
background and the request proceeds with the policy rules only). A call the completion itself opens
is resolved from the cache only (no decode step waits for jedi); :func:`prefetch_callees` queues a
document's callees for the engine's warm-ups, which run jedi while the editor is idle.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, replace

from . import lexing
from .lexing import enclosing_call  # re-exported: the call at the cursor
from .lexing.vocabulary import NOT_CALLEES
from .required_arguments import (  # noqa: F401 - re-exported: the table's home is required_arguments
    SHORT_FORM_SAFE_VALUE,
    PolicyTable,
    RequiredArgumentsConfig,
    RequiredKeyword,
    _default_policies,
    load_pyproject_rules,
)
from .resolve.imports import ImportMap, import_map, qualify  # noqa: F401 - re-exported
from .resolve.jedi_client import (  # noqa: F401 - re-exported: Param, clear_cache
    PARAM_KINDS,
    Param,
    clear_cache,
    jedi_members,
    jedi_request,
    jedi_signatures,
)

log = logging.getLogger(__name__)

_POSITIONAL = ("positional_only", "positional_or_keyword")
_KEYWORDABLE = ("positional_or_keyword", "keyword_only")


# --------------------------------------------------------------------------------------------------
# Result type


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
          budget_ms: float | None, cached_only: bool = False) -> CallSpec:
    imports = import_map(source)
    qualname = qualify(callee, imports)
    resolved = jedi_request("(", source, callee, paren, path, imports, jedi_signatures, budget_ms, cached_only)
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
                   *, budget_ms: float | None = None, cached_only: bool = False) -> CallSpec | None:
    """Like :func:`resolve_call` for a call the completion itself opens: ``source`` is the document
    prefix plus the completion so far, ending right after the ``(`` at ``paren_offset``. None when
    that ``(`` is not a call (``def f(``, a tuple, inside a string or comment). ``cached_only``
    (the decode loop): jedi's answer comes from the cache or the callee is left unresolved (policy
    rules only), so that no decode step waits for jedi; a missed callee rooted in an import or a
    builtin is queued for the next idle moment (:func:`prefetch_callees`). Never raises."""
    try:
        if not 0 <= paren_offset < len(source) or source[paren_offset] != "(":
            return None
        sc = lexing.scan(source[:paren_offset])
        if sc.context in ("string", "comment"):
            return None
        callee = lexing.callee_before(sc.text, paren_offset, sc)
        if callee is None:
            return None
        return _spec(source, callee, paren_offset, path, policies, budget_ms, cached_only)
    except Exception:
        log.debug("resolve_callee failed", exc_info=True)
        return None


def callee_resolver(path: str | None, policies: PolicyTable | None):
    """``resolver(source, paren) -> CallSpec | None`` for the calls a completion opens
    (:class:`engine.monitors.semantics.Semantics`): :func:`resolve_callee` from jedi's cache only,
    memoised per callee text for one request."""
    memo: dict = {}

    def resolver(text: str, paren: int):
        callee = text[max(0, paren - 120): paren]
        if callee not in memo:  # no decode step waits for jedi
            memo[callee] = resolve_callee(text, paren, path, policies, cached_only=True)
        return memo[callee]

    return resolver


_CALL_SITE = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:[ \t]*\.[ \t]*[A-Za-z_]\w*)*)[ \t]*\(")


def prefetch_callees(source: str, path: str | None = None, limit: int = 48) -> int:
    """Queue jedi's signatures of the callees that ``source`` (a document) calls, rooted in an
    import or a builtin, the most called first, at most ``limit`` (:func:`engine.resolve.jedi_client.
    defer_signatures`): the calls a completion opens are mostly calls the document already makes,
    and the decode loop only reads the cache (:func:`resolve_callee` with ``cached_only``). The
    engine's warm-ups run the queue while the editor is idle. A regular expression finds the call
    sites, comments and strings included: a callee named there costs an idle query, never a wrong
    answer. Returns how many were queued. Never raises."""
    from collections import Counter

    from .resolve.jedi_client import defer_signatures

    try:
        imports = import_map(source)
        counts = Counter()
        for m in _CALL_SITE.finditer(source):
            callee = re.sub(r"[ \t]+", "", m.group(1))
            if callee.split(".")[0] not in NOT_CALLEES:
                counts[callee] += 1
        queued = 0
        for callee, _ in reversed(counts.most_common(limit)):  # the queue runs newest first
            queued += defer_signatures(callee, path, imports)
        return queued
    except Exception:
        log.debug("prefetch_callees failed", exc_info=True)
        return 0


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
        return jedi_request(".", source, expression, dot, path, imports, jedi_members, budget_ms)
    except Exception:
        log.debug("member_names failed", exc_info=True)
        return None


_FROM_IMPORT = re.compile(r"[ \t]*from[ \t]+([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)[ \t]+import(?:[ \t]*\([ \t]*|[ \t]+|\Z)"
                          r"(?:[A-Za-z_]\w*(?:[ \t]+as[ \t]+[A-Za-z_]\w*)?[ \t]*,[ \t]*)*([A-Za-z_]\w*|)")


def import_names(source: str, offset: int, path: str | None = None) -> tuple[str, str, frozenset[str]] | None:
    """``(module, typed, names)`` where the cursor (``offset``, code points) is at a name that a
    ``from MODULE import`` statement imports (after ``import``, or after a comma of its list; ``typed``:
    the half-typed name): the names jedi lists for ``MODULE.`` (attributes and submodules, from the
    source or its stub; :func:`jedi_members`, so a module with a PEP 562 ``__getattr__`` or a compiled
    one without a stub is open: None), with what its source binds (:func:`_module_names_on_disk`;
    a module without Python source is open too). None too for a relative import, an import list in brackets over
    several lines, a cursor in a string or comment, or a module jedi does not find. Never raises."""
    try:
        offset = max(0, min(int(offset), len(source)))
        start = source.rfind("\n", 0, offset) + 1
        m = _FROM_IMPORT.fullmatch(source, start, offset)
        if m is None:
            return None
        sc = lexing.scan(source[:start])
        if sc.context != "code" or sc.depth:
            return None
        module = m.group(1)
        snippet = f"import {module}\n"
        names = jedi_request(".", snippet + module + ".", module, len(snippet) + len(module), path,
                             import_map(snippet), jedi_members, None)
        if not names:
            return None
        on_disk = _module_names_on_disk(module, path)
        if on_disk is None:  # no source, or one that binds names it cannot show
            return None
        return module, m.group(2), names | on_disk
    except Exception:
        log.debug("import_names failed", exc_info=True)
        return None


def _module_names_on_disk(module: str, path: str | None) -> frozenset[str] | None:
    """What the module's Python source, found as the import system would without importing it
    (:func:`engine.monitors.name_table.module_source`), binds or uses (a lenient superset, as for a
    star import: :func:`~engine.monitors.name_table.star_import_names`), with a package's submodules
    (its ``*.py`` files and sub-folders): jedi prefers a module's stub, which may lack what the source
    has (``from distutils.core import PyPIRCCommand``). None when no source is found (a C module:
    its stub may lack a name of another platform or version, ``from _ssl import RAND_egd``) or the
    source's namespace is dynamic (a star import, ``exec``...)."""
    from .monitors.name_table import module_source, star_import_names

    try:
        file = module_source(module, 0, path)
        if file is None:
            return None
        names = star_import_names(str(file))
        if names is None or file.name != "__init__.py":
            return names
        subs = {p.stem if p.suffix == ".py" else p.name for p in file.parent.iterdir()
                if p.suffix == ".py" or (p.is_dir() and p.name.isidentifier())}
        return names | subs
    except OSError:
        return None


def warm_up() -> None:
    """Pay jedi's first-call cost (~0.3-0.8 s: stubs, helper process) ahead of the first request;
    call from a background thread at startup. Never raises."""
    try:
        jedi_signatures("import os\nos.path.join(", len("import os\nos.path.join("), None)
    except Exception:  # pragma: no cover - defensive
        log.debug("jedi warm-up failed", exc_info=True)
