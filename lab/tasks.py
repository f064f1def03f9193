"""Benchmark tasks of the ``line``, ``args`` and ``block`` kinds, sampled from real files.

A :class:`Task` is one real file cut in three: ``prefix`` + ``target`` + ``suffix``; the benchmark
asks for a completion at the end of ``prefix`` and compares it with ``target``. Sampling is
deterministic for a seed (:func:`sample_tasks`). Offsets are code points (0-based); ``ast``
columns are UTF-8 byte offsets and go through :func:`utf8_col_to_index`. The ``slots`` kind builds
its tasks in :mod:`lab.bench_slots` from the same :class:`Task`.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from pathlib import Path

from engine.text import read_source

KINDS = ("line", "args", "block")  # sampled by :func:`sample_tasks`
DEFAULT_KINDS = KINDS + ("slots",)  # slots: :mod:`lab.bench_slots`
ALL_KINDS = DEFAULT_KINDS + ("workspace",)  # workspace (on request): :mod:`lab.bench_context`


@dataclass
class Task:
    """One benchmark task: the real file is ``prefix + target + suffix``; ``parses``: the original does."""

    kind: str
    path: str
    prefix: str
    target: str
    suffix: str
    parses: bool


# ------------------------------------------------------------------------------------------------
# task sampling


def utf8_col_to_index(line: str, col: int) -> int:
    """Code-point index in ``line`` of the UTF-8 byte column ``col`` (as ``ast`` gives, 0-based)."""
    return len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))


def line_starts(text: str) -> list[int]:
    """Code-point offset (0-based) where each ``\\n``-separated line of ``text`` starts."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def spans_for_file(text: str, rng: random.Random) -> dict[str, list[tuple[int, int]]]:
    """Candidate target spans ``(start, end)`` (code-point offsets) of each kind in one file's text;
    empty when the file does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {k: [] for k in KINDS}
    lines = text.split("\n")
    starts = line_starts(text)
    out: dict[str, list[tuple[int, int]]] = {k: [] for k in KINDS}
    string_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and node.end_lineno > node.lineno:
            string_lines.update(range(node.lineno, node.end_lineno + 1))
    for i, line in enumerate(lines):  # line: from a random column to the end of the line
        code = line.strip()
        if not code or code.startswith("#") or (i + 1) in string_lines or len(code) < 4:
            continue
        indent = len(line) - len(line.lstrip())
        if len(line) - 1 > indent + 1:
            col = rng.randint(indent + 1, len(line) - 1)
            out["line"].append((starts[i] + col, starts[i] + len(line)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno == node.end_lineno and (node.args or node.keywords):
            line = lines[node.lineno - 1]  # args: between the call's parentheses
            fend = utf8_col_to_index(line, node.func.end_col_offset)
            cend = utf8_col_to_index(line, node.end_col_offset)
            if node.func.end_lineno == node.lineno and fend < len(line) and line[fend] == "(" and line[cend - 1] == ")":
                if line[fend + 1 : cend - 1].strip():
                    out["args"].append((starts[node.lineno - 1] + fend + 1, starts[node.lineno - 1] + cend - 1))
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While, ast.If, ast.With, ast.Try)) \
                and isinstance(body, list) and body:
            first, last = body[0], body[-1]  # block: a body of at most 8 lines, after its indentation
            if first.lineno <= node.lineno or last.end_lineno - first.lineno > 7:
                continue
            if not lines[first.lineno - 2].rstrip().endswith(":"):
                continue
            line = lines[first.lineno - 1]
            indent = len(line) - len(line.lstrip())
            out["block"].append((starts[first.lineno - 1] + indent,
                                 starts[last.end_lineno - 1] + len(lines[last.end_lineno - 1])))
    return out


def sample_tasks(files: list[Path], n: int, seed: int, kinds=KINDS) -> list[Task]:
    """``n`` tasks, kinds in equal shares, deterministic for ``seed``."""
    rng = random.Random(seed)
    pools: dict[str, list[tuple[int, int, int]]] = {k: [] for k in kinds}
    texts: list[str] = []
    for path in files:
        try:
            text = read_source(path)
        except (OSError, ValueError):
            text = ""
        texts.append(text)
        for k, spans in spans_for_file(text, rng).items():
            if k in pools:
                pools[k].extend((len(texts) - 1, a, b) for a, b in spans)
    tasks: list[Task] = []
    for i, k in enumerate(kinds):
        share = n // len(kinds) + (1 if i < n % len(kinds) else 0)
        for f, a, b in rng.sample(pools[k], min(share, len(pools[k]))):
            text = texts[f]
            tasks.append(Task(k, str(files[f]), text[:a], text[a:b], text[b:], True))
    return tasks


def parse_kinds(spec: str | None) -> tuple[list[str], bool]:
    """``(kinds, slots_optional)`` from ``--kinds`` (comma-separated); None: the default
    (:data:`DEFAULT_KINDS`), where ``slots`` is dropped when its corpus has no call. Raises
    ValueError naming the valid kinds."""
    if spec is None:
        return list(DEFAULT_KINDS), True
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad or not kinds:
        raise ValueError(f"--kinds: unknown kind(s) {bad or spec!r}; choose from {','.join(ALL_KINDS)}")
    return list(dict.fromkeys(kinds)), False
