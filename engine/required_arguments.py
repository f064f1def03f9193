"""The required-argument policy table: keyword arguments that lint rules require at call sites.

The argument-slot monitor (:mod:`engine.monitors.slots`) refuses a call's closing ``)`` until the
keywords this table requires for the callee are present, and the safe continuation writes them with
their safe values. Rules come from ruff S113/S506 and pylint PLW1510/PLW1514 (the ``default``
profile), the ``strict-http`` profile, and ``[tool.fsm-complete.required-arguments]`` in the
project's ``pyproject.toml`` (:func:`load_pyproject_rules`). Rules are keyed by the callee's
qualified name (``"requests.get"``), so they hold even when jedi resolves no signature.

Not to be confused with the *mode policy* of :mod:`engine.fingerprint` (how a completion is
shaped: single/multi-line, token budget); this module decides which arguments a call must have.
Nothing here raises on a bad configuration: problems are collected in ``problems``.
"""

from __future__ import annotations

import keyword
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequiredKeyword:
    """A keyword argument that a lint rule requires at a call site.

    ``rule``: where the requirement comes from (``"S113"``, ``"PLW1514"``, ``"profile:strict-http"``,
    ``"pyproject"``). ``safe_value``: source text the safe continuation writes (``"10"``,
    ``'"utf-8"'``, ``"yaml.SafeLoader"`` with the module spelled as the file imports it).
    ``position``: 0-based positional index that also fills the parameter (``open`` encoding = 3),
    None when it can only be passed by keyword. ``unless_binary_mode``: not required when the mode
    argument (positional index ``mode_position``, or ``mode=``) contains ``"b"`` (PLW1514 only
    applies to text mode).
    """

    name: str
    rule: str
    safe_value: str
    position: int | None
    unless_binary_mode: bool = False
    mode_position: int | None = None



_S113 = RequiredKeyword("timeout", "S113", "10", None)
_REQUESTS_VERBS = ("get", "post", "put", "patch", "delete", "head", "options", "request")
_HTTPX_VERBS = _REQUESTS_VERBS + ("stream",)


def _http_qualnames() -> dict[str, bool]:
    """Qualified names of the HTTP calls -> whether ``params`` is positional index 1 there
    (only ``requests.get(url, params=None, **kwargs)``)."""
    names: dict[str, bool] = {}
    for verb in _REQUESTS_VERBS:
        for prefix in ("requests", "requests.api"):
            names[f"{prefix}.{verb}"] = verb == "get"
        # Session methods take (self, url, **kwargs) at run time: keyword only
        for prefix in ("requests.Session", "requests.sessions.Session"):
            names[f"{prefix}.{verb}"] = False
    for verb in _HTTPX_VERBS:
        names[f"httpx.{verb}"] = False
    return names


_HTTP = _http_qualnames()


def _builtin_rules() -> dict[str, tuple[RequiredKeyword, ...]]:
    """The ``default`` profile.

    * ruff S113 (request-without-timeout, from bandit B113): ``requests.{get,post,put,patch,delete,
      head,options,request}`` (also as ``requests.api.*`` and ``requests.Session.*`` methods) and
      ``httpx.{...,stream}`` need ``timeout``; safe value ``10`` (seconds). httpx has a default
      timeout, so ruff does not flag it, but the product asks for an explicit one.
    * pylint PLW1510 (subprocess-run-check): ``subprocess.run`` needs ``check``; safe ``True``.
    * pylint PLW1514 (unspecified-encoding): ``open``/``io.open`` (encoding is positional 3, the
      mode positional 1) and ``pathlib.Path.open`` (encoding 2, mode 0) need ``encoding`` in text
      mode; safe ``"utf-8"``.
    * ruff S506 (unsafe-yaml-load, from bandit B506): ``yaml.load`` needs ``Loader`` (positional 1);
      safe ``yaml.SafeLoader``, respelled with the file's alias of ``yaml``.
    """
    rules: dict[str, tuple[RequiredKeyword, ...]] = {name: (_S113,) for name in _HTTP}
    rules["subprocess.run"] = (RequiredKeyword("check", "PLW1510", "True", None),)
    encoding = RequiredKeyword("encoding", "PLW1514", '"utf-8"', 3, unless_binary_mode=True, mode_position=1)
    rules["builtins.open"] = rules["io.open"] = (encoding,)
    rules["pathlib.Path.open"] = (replace(encoding, position=2, mode_position=0),)
    rules["yaml.load"] = (RequiredKeyword("Loader", "S506", "yaml.SafeLoader", 1),)
    return rules


def _strict_http_rules() -> dict[str, tuple[RequiredKeyword, ...]]:
    """``strict-http``: the default profile plus ``headers={}`` and ``params={}`` on every HTTP call
    of S113 (the product's seed example ``requests.get(url, timeout=...)`` made explicit)."""
    rules = dict(_builtin_rules())
    for name, params_positional in _HTTP.items():
        rules[name] = rules[name] + (
            RequiredKeyword("headers", "profile:strict-http", "{}", None),
            RequiredKeyword("params", "profile:strict-http", "{}", 1 if params_positional else None),
        )
    return rules


SHORT_FORM_SAFE_VALUE = "None"  # safe value of rules given as a bare list of names in pyproject.toml


class PolicyTable:
    """Keyword arguments required at call sites, by qualified callee name.

    ``BUILTIN``: the built-in rules (the ``default`` profile). ``PROFILES``: ``"default"``,
    ``"strict-http"`` and ``"off"`` (no rules). ``problems``: human-readable complaints about the
    configuration this table was built from (unknown profile, malformed entries), for the caller
    to show once and log; the offending parts were ignored.
    """

    BUILTIN: ClassVar[dict[str, tuple[RequiredKeyword, ...]]] = _builtin_rules()
    PROFILES: ClassVar[dict[str, dict[str, tuple[RequiredKeyword, ...]]]] = {
        "default": BUILTIN,
        "strict-http": _strict_http_rules(),
        "off": {},
    }

    def __init__(self, rules: Mapping[str, tuple[RequiredKeyword, ...]] | None = None, profile: str = "default",
                 problems: tuple[str, ...] = ()):
        self.rules: dict[str, tuple[RequiredKeyword, ...]] = dict(self.BUILTIN if rules is None else rules)
        self.profile = profile
        self.problems = tuple(problems)

    def __repr__(self) -> str:
        return f"PolicyTable(profile={self.profile!r}, {len(self.rules)} callees)"

    @classmethod
    def from_config(cls, profile: str | None = None, extra: Mapping | None = None) -> PolicyTable:
        """A profile plus extra rules in the ``[tool.fsm-complete.required-arguments]`` format
        (what :func:`load_pyproject_rules` returns): ``"profile"`` (used when ``profile`` is None),
        ``"mod.func" = ["name", ...]`` (safe value :data:`SHORT_FORM_SAFE_VALUE`) or
        ``"mod.func" = {name = "safe source text"}``. Extra rules replace built-in rules of the same
        keyword. Never raises: bad parts are skipped and described in ``problems``."""
        problems: list[str] = []
        if extra is None:
            extra = {}
        elif not isinstance(extra, Mapping):
            problems.append(f"required-arguments must be a table, not {type(extra).__name__}; ignored")
            extra = {}
        chosen = profile if profile is not None else extra.get("profile", "default")
        if chosen not in cls.PROFILES:
            problems.append(f"unknown required-arguments profile {chosen!r}; using 'default' "
                            f"(choose one of {', '.join(cls.PROFILES)})")
            chosen = "default"
        rules = {name: list(rs) for name, rs in cls.PROFILES[chosen].items()}
        entries, entry_problems = _parse_rule_entries(extra)
        problems += entry_problems
        for qualname, added in entries.items():
            names = {r.name for r in added}
            rules[qualname] = [r for r in rules.get(qualname, []) if r.name not in names] + added
        for problem in problems:
            log.debug("required-arguments: %s", problem)
        return cls({name: tuple(rs) for name, rs in rules.items() if rs}, chosen, tuple(problems))

    def required_for(self, qualname: str | None, alias_of_module: Mapping[str, str] | None = None
                     ) -> tuple[RequiredKeyword, ...]:
        """Rules for ``qualname`` (empty when None or unknown). ``alias_of_module`` maps qualified
        names to the file's local names (``{"yaml": "y"}``, ``{"yaml.SafeLoader": "SafeLoader"}``,
        ``{"yaml": ""}`` for ``from yaml import *``); dotted safe values are respelled with the
        longest matching prefix (``yaml.SafeLoader`` -> ``y.SafeLoader``) and left as written when
        nothing matches (so ``from yaml import load`` alone keeps ``yaml.SafeLoader``, which needs
        ``import yaml``)."""
        if not qualname:
            return ()
        rules = self.rules.get(qualname, ())
        if alias_of_module:
            rules = tuple(replace(r, safe_value=_respell(r.safe_value, alias_of_module)) for r in rules)
        return rules


def _respell(value: str, aliases: Mapping[str, str]) -> str:
    if not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value):
        return value
    parts = value.split(".")
    for cut in range(len(parts), 0, -1):
        local = aliases.get(".".join(parts[:cut]))
        if local:
            return ".".join([local, *parts[cut:]])
        if local == "" and cut < len(parts):  # the module is star-imported: its names are bare
            return ".".join(parts[cut:])
    return value


def _parse_rule_entries(table: Mapping) -> tuple[dict[str, list[RequiredKeyword]], list[str]]:
    entries: dict[str, list[RequiredKeyword]] = {}
    problems: list[str] = []
    for qualname, spec in table.items():
        if qualname == "profile":
            if not isinstance(spec, str):
                problems.append(f"profile must be a string, not {spec!r}")
            continue
        if not isinstance(qualname, str) or not re.fullmatch(r"\.*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", qualname):
            problems.append(f"{qualname!r} is not a dotted callee name like \"mylib.fetch\"; ignored")
            continue
        if isinstance(spec, (list, tuple)):
            pairs = [(name, SHORT_FORM_SAFE_VALUE) for name in spec]
        elif isinstance(spec, Mapping):
            pairs = list(spec.items())
        else:
            problems.append(f"{qualname}: expected a list of keyword names or a table of name = \"safe value\", "
                            f"got {spec!r}; ignored")
            continue
        added = []
        for name, value in pairs:
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                problems.append(f"{qualname}: {name!r} is not a keyword-argument name; ignored")
                continue
            if isinstance(value, (bool, int, float)):  # TOML `timeout = 5` / `ssl = true`
                value = repr(value)
            if not isinstance(value, str) or not value.strip():
                problems.append(f"{qualname}: safe value of {name} must be Python source text such as \"5\", "
                                f"got {value!r}; ignored")
                continue
            added.append(RequiredKeyword(name, "pyproject", value.strip(), None))
        if added:
            entries[qualname] = added
    return entries, problems


class RequiredArgumentsConfig(dict):
    """The ``[tool.fsm-complete.required-arguments]`` table (valid entries only) as returned by
    :func:`load_pyproject_rules`; ``problems`` lists what was wrong (for the caller to log)."""

    def __init__(self, entries: Mapping | None = None, problems: list[str] | None = None):
        super().__init__(entries or {})
        self.problems: list[str] = list(problems or [])


def load_pyproject_rules(project_root: str | Path) -> RequiredArgumentsConfig:
    """Read ``[tool.fsm-complete.required-arguments]`` from ``<project_root>/pyproject.toml`` (or
    from ``project_root`` itself when it names a ``.toml`` file). Returns the valid entries, ready
    for :meth:`PolicyTable.from_config` (``extra=``); ``{}`` when the file or table is missing.
    Never raises: an unreadable file, broken TOML or malformed entries yield ``{}``/fewer entries
    and a description in ``.problems``."""
    try:
        path = Path(project_root)
        if path.suffix != ".toml":
            path = path / "pyproject.toml"
        if not path.is_file():
            return RequiredArgumentsConfig()
        try:
            import tomllib
        except ImportError:  # Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ImportError:
                problem = f"{path}: cannot read TOML on this Python; `pip install tomli` (Python 3.10)"
                return RequiredArgumentsConfig(problems=[problem])
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            return RequiredArgumentsConfig(problems=[f"{path}: cannot read ({exc}); required-argument rules ignored"])
        except tomllib.TOMLDecodeError as exc:
            return RequiredArgumentsConfig(problems=[f"{path}: invalid TOML ({exc}); required-argument rules ignored"])
        table = data.get("tool", {})
        for key in ("fsm-complete", "required-arguments"):
            table = table.get(key) if isinstance(table, dict) else None
            if table is None:
                return RequiredArgumentsConfig()
        if not isinstance(table, dict):
            problem = f"{path}: [tool.fsm-complete.required-arguments] must be a table, not {type(table).__name__}"
            return RequiredArgumentsConfig(problems=[problem + "; ignored"])
        entries, problems = _parse_rule_entries(table)
        out = {name: {r.name: r.safe_value for r in rs} for name, rs in entries.items()}
        profile = table.get("profile")
        if isinstance(profile, str):
            if profile in PolicyTable.PROFILES:
                out["profile"] = profile
            else:
                problems.append(f"unknown required-arguments profile {profile!r}; using 'default' "
                                f"(choose one of {', '.join(PolicyTable.PROFILES)})")
        return RequiredArgumentsConfig(out, [f"{path}: {p}" for p in problems])
    except Exception as exc:  # never raise (e.g. permission errors on odd paths)
        log.debug("load_pyproject_rules(%r) failed", project_root, exc_info=True)
        return RequiredArgumentsConfig(problems=[f"{project_root}: cannot load required-argument rules ({exc})"])


@lru_cache(maxsize=1)
def _default_policies() -> PolicyTable:
    return PolicyTable.from_config("default")
