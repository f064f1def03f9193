"""``fsm-complete bench --kinds slots``: argument-slot tasks built from real calls.

A *slot task* is a real call of one of the callees that the argument-slot constraints know
(``requests.*`` and ``httpx.*`` request functions, ``subprocess.run``, the builtin ``open`` and
``yaml.load``) found in real files. Callees are resolved with :mod:`ast` from the file's imports
(``import requests as rq``, ``from subprocess import run``); pip's vendored requests
(``from pip._vendor import requests``) belongs to the requests family but keeps its own name in the
counts (ruff's S113 does not know that path). A bare ``open`` is the builtin unless the module
binds the name itself. Relative imports are not followed.

Cursor (deterministic for ``--seed``): for every sampled call one number is drawn from the sampling
generator; when it is below 0.5 *and* the call's first argument is positional and followed by
``", "`` and more arguments, the cursor goes after that ``", "`` (``cursor="after_first_arg"``),
otherwise right after the call's ``(`` (``cursor="open_paren"``). The target is the rest of the
argument list up to (not including) its ``)``; the document is the real file with the target
removed, as for the ``args`` kind. Calls may span several lines; calls inside f-strings and calls
with an empty argument list are skipped.

Default corpus: the whole standard library of the running interpreter (``sysconfig``'s
``stdlib``, its ``site-packages`` excluded) then the interpreter's ``site-packages``
(``site.getsitepackages()``), each in sorted path order; ``--corpus DIR`` replaces both. Tasks are
drawn in equal shares per callee family (``requests``, ``httpx``, ``subprocess.run``, ``open``,
``yaml.load``), a family with too few calls handing its share to the others.

Metrics of a completed call (the completion inserted where the target was):

* ``slot_violation``: ruff reports S113 (request without ``timeout``), PLW1510 (``subprocess.run``
  without ``check``), PLW1514 (``open`` in text mode without ``encoding``; a *preview* rule in ruff
  0.17, hence ``--preview``) or S506 (unsafe ``yaml.load``) at the completed call: a diagnostic
  whose start lies inside the call's span. The same check on the original file gives the reference
  ``slot_violations_original``.
* ``unknown_keywords``: keyword-argument names of the completed call that are not in the callee's
  signature (:func:`engine.signatures.resolve_call`; a callee whose ``keyword_names`` is None
  accepts any name and counts as unresolved). Names come from :mod:`ast`, or, when the completed
  file does not parse, from ``name=`` tokens at depth 1 of the call (:mod:`tokenize`).
"""

from __future__ import annotations

import ast
import io
import json
import random
import shutil
import site
import subprocess
import sysconfig
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from engine.text import read_source

from .tasks import Task, line_starts, utf8_col_to_index

SLOT_RULES = ("S113", "PLW1510", "PLW1514", "S506")
# PLW1514 (unspecified-encoding) is a preview rule in ruff 0.17: without --preview it is ignored
RUFF_ARGS = ("check", "--no-cache", "--isolated", "--preview", "--select", ",".join(SLOT_RULES),
             "--output-format", "json")

_HTTP = ("get", "options", "head", "post", "put", "patch", "delete", "request")
CALLEES = frozenset(
    [f"requests.{f}" for f in _HTTP] + [f"httpx.{f}" for f in (*_HTTP, "stream")]
    + ["subprocess.run", "open", "yaml.load"]
)  # canonical names (:func:`canonical`)
FAMILIES = ("requests", "httpx", "subprocess.run", "open", "yaml.load")
_VENDOR = "pip._vendor."
_SCAN_WORDS = ("requests", "httpx", "subprocess", "open", "yaml")


def family(qualname: str) -> str:
    """The callee family of a (possibly vendored) qualified name: requests, httpx, or the name."""
    name = canonical(qualname)
    return name.split(".", 1)[0] if name.startswith(("requests.", "httpx.")) else name


@dataclass
class CallSite:
    """One real call (code-point offsets into its file's text)."""

    qualname: str
    start: int  # first character of the call expression
    open_paren: int  # offset of its "("
    close_paren: int  # offset of its ")"
    after_first_arg: int | None  # offset after "<first positional argument>, " when more arguments follow


@dataclass
class SlotTask(Task):
    callee: str = ""
    call_start: int = 0  # offset of the call in the document (the prefix is unchanged by completion)
    open_paren: int = 0
    cursor: str = "open_paren"  # or "after_first_arg"
    original: dict = field(default_factory=dict)  # metrics of the real call (reference)


# ------------------------------------------------------------------------------------------------
# finding calls


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted module path for every absolute import in the file (any scope)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".", 1)[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _module_bindings(tree: ast.Module) -> set[str]:
    """Names the module binds at its top level other than by import (def, class, assignment)."""
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    bound.add(sub.id)
    return bound


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def callee_name(func: ast.expr, aliases: dict[str, str], shadowed: set[str]) -> str | None:
    """Dotted name of a call's function after import aliases (``"open"`` for the builtin), or None."""
    parts = _dotted(func)
    if parts is None:
        return None
    head = parts[0]
    if head in aliases:
        name = ".".join([aliases[head]] + parts[1:])
    elif head == "open" and len(parts) == 1 and head not in shadowed:
        return "open"
    else:
        return None
    return name


def canonical(qualname: str) -> str:
    """``qualname`` without pip's vendoring prefix and ``requests.api.`` (``requests.get``)."""
    qualname = qualname.removeprefix(_VENDOR)
    return qualname.replace("requests.api.", "requests.", 1) if qualname.startswith("requests.api.") else qualname


def _fstring_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(sub) for sub in ast.walk(node))
    return inside


def find_calls(text: str) -> list[CallSite]:
    """The calls of :data:`CALLEES` in ``text`` (in source order); empty when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    aliases = _import_aliases(tree)
    shadowed = _module_bindings(tree) | set(aliases)
    in_fstring = _fstring_nodes(tree)
    lines = text.split("\n")
    starts = line_starts(text)

    def offset(lineno: int, col: int) -> int:
        return starts[lineno - 1] + utf8_col_to_index(lines[lineno - 1], col)

    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in in_fstring or not (node.args or node.keywords):
            continue
        name = callee_name(node.func, aliases, shadowed)
        if name is None:
            continue
        if canonical(name) not in CALLEES:
            continue
        open_paren = offset(node.func.end_lineno, node.func.end_col_offset)
        close_paren = offset(node.end_lineno, node.end_col_offset) - 1
        if text[open_paren : open_paren + 1] != "(" or text[close_paren : close_paren + 1] != ")":
            continue
        after = None
        first = node.args[0] if node.args else None
        if first is not None and not isinstance(first, ast.Starred) and len(node.args) + len(node.keywords) > 1:
            end = offset(first.end_lineno, first.end_col_offset)
            kw_start = min((offset(k.lineno, k.col_offset) for k in node.keywords), default=end)
            if text[end : end + 2] == ", " and kw_start >= end and text[end + 2 : close_paren].strip():
                after = end + 2
        out.append(CallSite(name, offset(node.lineno, node.col_offset), open_paren, close_paren, after))
    out.sort(key=lambda c: c.start)
    return out


def default_slot_roots() -> list[Path]:
    """The standard library, then this interpreter's site-packages directories."""
    roots = [Path(sysconfig.get_paths()["stdlib"])]
    for p in site.getsitepackages():
        if Path(p) not in roots:
            roots.append(Path(p))
    return roots


def slot_files(corpus: str | Path | None = None) -> list[Path]:
    """Every ``*.py`` file of the slot corpus that may hold a call (a cheap text check), in a fixed
    order: ``corpus`` when given, else :func:`default_slot_roots` (the stdlib's own ``site-packages``
    is skipped; the interpreter's site-packages is scanned as a root of its own)."""
    roots = [Path(corpus)] if corpus else default_slot_roots()
    seen: set[Path] = set()
    files = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if root == roots[0] and not corpus and ("site-packages/" in rel or "dist-packages/" in rel):
                continue
            real = path.resolve()
            if real in seen or not path.is_file():
                continue
            seen.add(real)
            files.append(path)
    return files


def _read(path: Path) -> str:
    try:
        text = read_source(path)
    except (OSError, ValueError):
        return ""
    return text if any(w in text for w in _SCAN_WORDS) else ""


def sample_slot_tasks(files: list[Path], n: int, seed: int) -> tuple[list[SlotTask], dict[str, int]]:
    """``(tasks, calls found per callee)``: ``n`` slot tasks, equal shares per callee family."""
    rng = random.Random(seed)
    pools: dict[str, list[tuple[int, CallSite]]] = {f: [] for f in FAMILIES}
    found: dict[str, int] = {}
    texts: dict[int, str] = {}
    for i, path in enumerate(files):
        text = _read(path)
        calls = [c for c in find_calls(text) if text[c.open_paren + 1 : c.close_paren].strip()] if text else []
        if calls:
            texts[i] = text
        for c in calls:
            found[c.qualname] = found.get(c.qualname, 0) + 1
            pools[family(c.qualname)].append((i, c))
    shares = {f: 0 for f in FAMILIES}
    left = n
    while left > 0 and any(shares[f] < len(pools[f]) for f in FAMILIES):
        for f in FAMILIES:
            if left and shares[f] < len(pools[f]):
                shares[f] += 1
                left -= 1
    tasks: list[SlotTask] = []
    for f in FAMILIES:
        for i, c in rng.sample(pools[f], shares[f]):
            tasks.append(make_task(str(files[i]), texts[i], c, rng.random() < 0.5))
    return tasks, dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def make_task(path: str, text: str, call: CallSite, after_first_arg: bool) -> SlotTask:
    """The slot task of ``call`` in ``text``: cursor after the first argument's ``", "`` when
    ``after_first_arg`` and the call has one, else right after ``(``; target up to ``)``."""
    if after_first_arg and call.after_first_arg is not None:
        cursor, at = "after_first_arg", call.after_first_arg
    else:
        cursor, at = "open_paren", call.open_paren + 1
    return SlotTask("slots", path, text[:at], text[at : call.close_paren], text[call.close_paren:], True,
                    callee=call.qualname, call_start=call.start, open_paren=call.open_paren, cursor=cursor)


# ------------------------------------------------------------------------------------------------
# metrics


def ruff_command() -> list[str]:
    """The ruff executable (the PyPI package's binary, else ``ruff`` on PATH). Raises RuntimeError."""
    try:
        from ruff.__main__ import find_ruff_bin

        return [str(find_ruff_bin())]
    except (ImportError, FileNotFoundError):
        exe = shutil.which("ruff")
        if exe:
            return [exe]
    raise RuntimeError("the slots benchmark needs ruff for S113/PLW1510/PLW1514/S506: `pip install ruff`")


def ruff_version() -> str:
    return subprocess.run(ruff_command() + ["--version"], capture_output=True, text=True, check=True).stdout.strip()


def ruff_diagnostics(text: str) -> list[dict]:
    """Ruff's diagnostics of :data:`SLOT_RULES` on ``text`` (written to a temporary file) as
    ``[{"code", "start"}]``, ``start`` a code-point offset into ``text``."""
    with tempfile.TemporaryDirectory(prefix="fsm-slots-") as tmp:
        path = Path(tmp) / "completed.py"
        path.write_text(text, encoding="utf-8")
        proc = subprocess.run(ruff_command() + list(RUFF_ARGS) + [str(path)], capture_output=True, text=True,
                              check=False, cwd=tmp)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    starts = line_starts(text)
    out = []
    for d in json.loads(proc.stdout or "[]"):
        if d.get("code") not in SLOT_RULES:
            continue
        row, col = d["location"]["row"], d["location"]["column"]  # 1-based, columns in characters
        if row - 1 < len(starts):
            out.append({"code": d["code"], "start": starts[row - 1] + col - 1})
    return out


def call_keywords(doc: str, call_start: int, open_paren: int) -> tuple[list[str], int, str]:
    """``(keyword names, end offset of the call, how)`` of the call whose ``(`` is at ``open_paren``.

    ``how`` is ``"ast"`` when ``doc`` parses, else ``"tokenize"`` (``name=`` at depth 1 of the
    call; end = after its ``)``, or the end of the last token read when it is never closed).
    ``**kwargs`` unpacking contributes no name.
    """
    try:
        tree = ast.parse(doc)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None:
        lines = doc.split("\n")
        starts = line_starts(doc)

        def offset(lineno: int, col: int) -> int:
            return starts[lineno - 1] + utf8_col_to_index(lines[lineno - 1], col)

        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and offset(node.lineno, node.col_offset) == call_start \
                    and offset(node.func.end_lineno, node.func.end_col_offset) == open_paren:
                return [k.arg for k in node.keywords if k.arg], offset(node.end_lineno, node.end_col_offset), "ast"
    names: list[str] = []
    depth, prev, pending, end = 0, None, None, open_paren + 1
    base = line_starts(doc[open_paren:])
    try:
        for tok in tokenize.generate_tokens(io.StringIO(doc[open_paren:]).readline):
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            end = open_paren + base[tok.end[0] - 1] + tok.end[1]
            if pending is not None:
                if tok.type == tokenize.OP and tok.string == "=":
                    names.append(pending)
                pending = None
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
                if depth == 0:
                    break
            elif depth == 1 and tok.type == tokenize.NAME and prev in ("(", ","):
                pending = tok.string
            prev = tok.string if tok.type == tokenize.OP else tok.type
            if tok.type == tokenize.ENDMARKER:
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    return names, end, "tokenize"


def signature_of(task: SlotTask):
    """The task's :class:`CallSpec` (memoised on the task): resolved on the document the engine
    sees (the file with the target removed) at the cursor."""
    if "spec" not in task.original:
        from engine.signatures import resolve_call

        task.original["spec"] = resolve_call(task.prefix + task.suffix, len(task.prefix), path=task.path)
    return task.original["spec"]


def slot_metrics(task: SlotTask, doc: str) -> dict:
    """Slot metrics of the call at ``task.call_start`` in the completed document ``doc``."""
    names, end, how = call_keywords(doc, task.call_start, task.open_paren)
    diags = [d for d in ruff_diagnostics(doc) if task.call_start <= d["start"] < end]
    spec = signature_of(task)
    allowed = getattr(spec, "keyword_names", None)
    unknown = [k for k in names if allowed is not None and k not in allowed]
    return {
        "callee": task.callee,
        "cursor": task.cursor,
        "keywords": names,
        "keywords_from": how,
        "unknown_keywords": len(unknown),
        "unknown_keyword_names": unknown,
        "unresolved": allowed is None,
        "slot_rules": sorted({d["code"] for d in diags}),
        "slot_violation": bool(diags),
    }


def original_metrics(task: SlotTask) -> dict:
    """:func:`slot_metrics` of the real call (memoised on the task): the reference figures."""
    if "metrics" not in task.original:
        task.original["metrics"] = slot_metrics(task, task.prefix + task.target + task.suffix)
    return task.original["metrics"]


def add_slot_fields(row: dict, task: SlotTask, doc: str) -> None:
    """Add the slot metrics of the completion and of the original call to a bench row."""
    row.update(slot_metrics(task, doc))
    orig = original_metrics(task)
    row["slot_violation_original"] = orig["slot_violation"]
    row["slot_rules_original"] = orig["slot_rules"]
    row["unknown_keywords_original"] = orig["unknown_keywords"]


def summarize_slots(rows: list[dict]) -> dict:
    """Slot figures of one mode's slot rows (counts of tasks unless named otherwise)."""
    by_rule: dict[str, int] = {}
    for r in rows:
        for code in r["slot_rules"]:
            by_rule[code] = by_rule.get(code, 0) + 1
    by_callee: dict[str, dict] = {}
    for r in rows:
        c = by_callee.setdefault(r["callee"], {"n": 0, "slot_violations": 0, "slot_violations_original": 0,
                                               "unknown_keywords": 0, "syntax_valid": 0})
        c["n"] += 1
        c["slot_violations"] += r["slot_violation"]
        c["slot_violations_original"] += r["slot_violation_original"]
        c["unknown_keywords"] += r["unknown_keywords"]
        c["syntax_valid"] += r["valid"]
    return {
        "slot_violations": sum(r["slot_violation"] for r in rows),
        "slot_violations_original": sum(r["slot_violation_original"] for r in rows),
        "slot_violations_by_rule": dict(sorted(by_rule.items())),
        "unknown_keywords": sum(r["unknown_keywords"] for r in rows),
        "unknown_keywords_original": sum(r["unknown_keywords_original"] for r in rows),
        "calls_with_unknown_keywords": sum(1 for r in rows if r["unknown_keywords"]),
        "unresolved_signatures": sum(1 for r in rows if r["unresolved"]),
        "keywords_from_tokenize": sum(1 for r in rows if r["keywords_from"] == "tokenize"),
        "by_callee": dict(sorted(by_callee.items())),
    }


def report_lines(report: dict) -> list[str]:
    """The "Slots" section of report.md."""
    c = report["constrained"].get("by_kind", {}).get("slots")
    u = report["unconstrained"].get("by_kind", {}).get("slots")
    if not c or not u:
        return []
    meta = report.get("slots", {})
    lines = ["", "## Slots", "",
             f"{c['n']} tasks from real calls ({meta.get('corpus', '')}); ruff `{meta.get('ruff', '')}` "
             f"(`{' '.join(RUFF_ARGS)}`); signatures: {meta.get('signatures', '')}.", "",
             "| metric | constrained | unconstrained | original code |", "|---|---|---|---|",
             f"| slot_violations (tasks, S113/PLW1510/PLW1514/S506 at the call) | {c['slot_violations']} | "
             f"{u['slot_violations']} | {c['slot_violations_original']} |",
             f"| unknown_keywords (keyword names not in the signature) | {c['unknown_keywords']} | "
             f"{u['unknown_keywords']} | {c['unknown_keywords_original']} |",
             f"| syntax_valid | {c['syntax_valid']} | {u['syntax_valid']} | 1.0 |",
             f"| empty | {c['empty']} | {u['empty']} | |",
             f"| unresolved signatures | {c['unresolved_signatures']} | {u['unresolved_signatures']} | |",
             "",
             "| callee | n | violations (c) | violations (u) | violations (orig) | unknown kw (c) | unknown kw (u) |",
             "|---|---|---|---|---|---|---|"]
    for name, cc in c["by_callee"].items():
        uc = u["by_callee"].get(name, {})
        lines.append(f"| {name} | {cc['n']} | {cc['slot_violations']} | {uc.get('slot_violations')} | "
                     f"{cc['slot_violations_original']} | {cc['unknown_keywords']} | {uc.get('unknown_keywords')} |")
    found = meta.get("calls_found", {})
    if found:
        lines += ["", "Calls found: " + ", ".join(f"`{k}` {v}" for k, v in found.items()) + "."]
    return lines
