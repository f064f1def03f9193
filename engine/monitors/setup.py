"""Which semantic monitors a completion at a cursor gets.

:func:`monitors_at` resolves the call the cursor is in (its argument slots), the object before a
``name.`` (member access) or the indentation's demand for a block header, and gives the monitors a
resolver for calls the completion itself opens. Resolution failures leave a monitor out: a
monitor is only ever added when its knowledge is static and certain (never block real code).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from .. import signatures
from ..lexing import automaton as pylex
from ..required_arguments import PolicyTable, load_pyproject_rules
from .base import PROSE_MODES
from .block_header import block_header_at
from .member import ImportedName, MemberAccess
from .names import names_monitor
from .semantics import Semantics
from .slots import call_slots_at

_MEMBER_RE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.([A-Za-z_]\w*)?$")
# the module path of an import statement (``from distutils.``, ``import os.pa``): after its dots come
# submodules, which a package need not import nor its stub list (``from distutils.tests import ...``)
_MODULE_PATH = re.compile(r"[ \t]*(?:from[ \t]+\.*|import[ \t]+(?:[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*)[\w.]*\Z")


class RequiredArgumentTables:
    """The required-argument policy table per project: the settings profile, overridden by the
    nearest ``pyproject.toml`` ``[tool.fsm-complete.required-arguments]`` above a document path
    (memoised by profile, project root and the file's modification time: a rule added while the
    server or daemon runs applies to the next request, field report D08)."""

    def __init__(self):
        self._tables: dict = {}

    def for_path(self, profile: str, path: str | None) -> PolicyTable:
        root, stamp = None, None
        if path:
            for parent in Path(path).resolve().parents:
                try:
                    info = (parent / "pyproject.toml").stat()
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    root, stamp = parent, (info.st_mtime_ns, info.st_size)
                    break
        key = (profile, str(root))
        memo = self._tables.get(key)
        if memo is None or memo[0] != stamp:
            extra = load_pyproject_rules(root) if root is not None else {}
            table = PolicyTable.from_config(extra.pop("profile", profile) if isinstance(extra, dict) else profile,
                                            extra if isinstance(extra, dict) else None)
            memo = self._tables[key] = (stamp, table)
        return memo[1]


def monitors_at(prefix: str, suffix: str, path: str | None, state: pylex.Lex, policies: PolicyTable, *,
                member_access: bool = True, domain_vocabulary=(), names: bool = True,
                multiline: bool = False, healed: str = "", budget_ms: float | None = None) -> Semantics:
    """The semantic monitors for a completion at the end of ``prefix`` (lexer ``state`` there; the
    document is ``prefix + suffix``, ``path`` its file or None): the slots of the call the cursor is
    in, member access after ``name.`` (or the block-header rule), and a resolver for calls the
    completion opens, and (``names``) the names monitor. In a string or comment: no monitor.
    ``multiline``: the completion may write several lines (the block-header rule then judges its last).
    ``healed``: the end of the cursor line that token healing gave back (``prefix`` ends before it).
    ``budget_ms``: the most time each jedi query (the call's signature, the members after ``.``) may
    take (None: no limit); a later answer leaves that monitor off for this request (fewer
    constraints, never a refusal of real code) and is memoised for the next
    (:func:`engine.resolve.jedi_client.jedi_request`)."""
    sem = Semantics(source=prefix)
    if state.mode in PROSE_MODES:
        return sem
    source = prefix + suffix
    if names:
        sem.names = names_monitor(prefix, suffix, len(state.brackets), path=path)
    if expects_errors(prefix):
        return _member_or_header(sem, prefix, suffix, path, state, member_access, domain_vocabulary, multiline, healed,
                                 budget_ms)
    sem.resolver = signatures.callee_resolver(path, policies)
    call = signatures.enclosing_call(source, len(prefix))
    if call is not None:
        spec = signatures.resolve_call(source, len(prefix), path, policies, budget_ms=budget_ms)
        if spec is not None:
            slots, sem.suffix_closes = call_slots_at(spec, prefix, call[1], suffix, state)
            if slots is not None:
                sem.calls.append(slots)
    return _member_or_header(sem, prefix, suffix, path, state, member_access, domain_vocabulary, multiline, healed,
                             budget_ms)


_ERROR_BLOCK = re.compile(r"^[ \t]*(?:async[ \t]+)?with\b.*(?:\.assertRaises\w*|\braises)[ \t]*\(")


def expects_errors(prefix: str, lookback: int = 40) -> bool:
    """Is the cursor in the body of ``with self.assertRaises(...)`` / ``with pytest.raises(...)``?
    Tests there call things wrongly on purpose (a missing argument to see the ``TypeError``), so the
    argument-slot rules are not enforced (real code must never be refused)."""
    lines = prefix.split("\n")[-lookback:]
    width = len(lines[-1]) - len(lines[-1].lstrip(" \t"))
    for line in reversed(lines[:-1]):
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if indent < width:
            if _ERROR_BLOCK.match(line):
                return True
            width = indent
            if indent == 0:
                break
    return False


def _member_or_header(sem: Semantics, prefix: str, suffix: str, path, state, member_access: bool,
                      domain_vocabulary, multiline: bool = False, healed: str = "",
                      budget_ms: float | None = None) -> Semantics:
    """Add member access after ``name.`` or at a name ``from MODULE import`` imports (the module's
    attributes and submodules), or the block-header rule, to ``sem``."""
    source = prefix + suffix
    m = _MEMBER_RE.search(prefix[-300:])
    header = block_header_at(prefix, suffix, state, multiline, healed)
    if header is not None:
        sem.member = header  # the indentation after the cursor line asks for a compound statement
    elif member_access and m is not None and state.mode in (pylex.DOT, pylex.NAME, pylex.DOT2, pylex.DOT_WS) \
            and not _MODULE_PATH.match(prefix, prefix.rfind("\n") + 1):
        names = signatures.member_names(source, len(prefix), path, budget_ms=budget_ms)
        if names:
            sem.member = MemberAccess(set(names) | set(domain_vocabulary), m.group(2) or "", m.group(1))
    elif member_access and state.mode in (pylex.CODE, pylex.NAME):
        found = signatures.import_names(source, len(prefix), path)  # from MODULE import <name>
        if found is not None:
            module, typed, names = found
            sem.member = ImportedName(set(names) | set(domain_vocabulary), typed, module)
    return sem


def describe(sem: Semantics) -> dict:
    """The monitors at the cursor for ``Completion.semantics`` (explain)."""
    return {"calls": [c.describe() for c in sem.calls], "refusals": sem.refusals,
            "member": None if sem.member is None else
            {"object": sem.member.owner, "attributes": len(sem.member.names), "rule": sem.member.RULE},
            "names": None if sem.names is None else {"known": len(sem.names.known), "rule": "unbound-name"},
            "fuses": []}
