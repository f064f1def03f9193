"""The bench's ``workspace`` kind: does project context make completions useful?

Tasks: ``line`` tasks (cursor at a random point of a code line, target = the rest of the line,
:func:`lab.tasks.spans_for_file`) in corpus files that sit in a package, i.e. a folder with other
Python files and an ``__init__.py``. Default corpus: :func:`unseen_projects`, the installed mpmath and
fsspec (torch's own dependencies, so present wherever the engine runs; BSD-licensed and not in the
default model's training corpus, docs/model.md; sympy was until session 22, whose model trained on
the corpus pack, sympy included): a user's project is code the model never saw. The
held-out standard-library files (``--corpus`` of the stdlib) are no such test: the model never
trained on ``email/encoders.py`` itself, but it did on all its siblings, so it already "knows the
project" and the siblings can add little. The project is the file's siblings: the workspace slice
:func:`engine.context.workspace.collect` reads for the file's folder (nearest first, bounded by the
``context.workspaceFiles``/``workspaceBytes`` settings), the file itself left out.

Each task runs constrained four ways: with the project (the rows of the ``constrained`` mode),
without it (the cache model still counts the document itself), with the cache model off, and with
the cache model off but the project's most similar snippets in the prompt (the retrieval baseline,
:func:`retrieved_prefix`); the unconstrained mode runs with the project. Figures: ``useful`` (shown and exact or edit similarity
>= 0.7, :mod:`lab.usefulness`) of each, and ``context_gain`` = useful with the project / useful
with the cache model off.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

from engine.text import read_source

from .tasks import Task, spans_for_file
from .usefulness import USEFUL_SIMILARITY, edit_similarity

KIND = "workspace"


UNSEEN_PACKAGES = ("mpmath", "fsspec")  # sympy until session 22: the GPU day's corpus pack has it


def unseen_projects() -> list[Path]:
    """The parsable ``*.py`` files (:func:`lab.corpus.corpus_files`) of the installed
    :data:`UNSEEN_PACKAGES`: packages the default model never trained on (docs/model.md lists its
    corpus). Raises ``ModuleNotFoundError`` when one is not installed (torch requires both)."""
    import importlib.util

    from .corpus import corpus_files

    files: list[Path] = []
    for name in UNSEEN_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"bench --kinds workspace: package {name!r} is not installed (pass --corpus DIR)")
        files += corpus_files(Path(list(spec.submodule_search_locations)[0]))
    return files


def package_files(files: list[Path]) -> list[Path]:
    """The files of ``files`` in a package: a folder with an ``__init__.py`` and at least one other
    ``*.py`` file (a folder of unrelated modules, like the standard library's top level, is no project)."""
    return [p for p in files if (p.parent / "__init__.py").is_file() and any(q != p for q in p.parent.glob("*.py"))]


def sample_workspace_tasks(files: list[Path], n: int, seed: int) -> list[Task]:
    """``n`` ``workspace`` tasks (``line`` spans) from the package files of ``files``, deterministic for ``seed``."""
    rng = random.Random(seed)
    pool: list[tuple[int, int, int]] = []
    texts: list[str] = []
    files = package_files(files)
    for path in files:
        try:
            text = read_source(path)
        except (OSError, ValueError):
            text = ""
        texts.append(text)
        pool.extend((len(texts) - 1, a, b) for a, b in spans_for_file(text, rng)["line"])
    picked = rng.sample(pool, min(n, len(pool)))
    return [Task(KIND, str(files[f]), texts[f][:a], texts[f][a:b], texts[f][b:], True) for f, a, b in picked]


def project_for(task: Task, settings) -> object:
    """The task's project context: its siblings (:func:`engine.context.workspace.collect` on its folder)."""
    from engine.api import ProjectContext
    from engine.context.workspace import collect

    path = Path(task.path)
    texts = collect(path.parent, near=path, max_files=settings.context.workspace_files,
                    max_bytes=settings.context.workspace_bytes, exclude=[path])
    return ProjectContext(workspace=texts)


def useful(text: str, target: str) -> bool:
    """Shown and exact, or edit similarity >= :data:`lab.usefulness.USEFUL_SIMILARITY`."""
    text, target = text.strip(), target.strip()
    return bool(text) and (text == target or edit_similarity(text, target) >= USEFUL_SIMILARITY)


IDENT = re.compile(r"[A-Za-z_]\w+")


def retrieved_prefix(task: Task, project, k: int = 2, window: int = 8, keep_chars: int = 2400, fits=None) -> str:
    """The prompt-retrieval baseline (RepoCoder-style, one round): the ``k`` windows of ``window``
    lines of the project's files most similar (Jaccard of identifier sets) to the prefix's last
    ``window`` lines, as comments above the prefix's last whole lines. ``fits(text) -> bool``: does
    the prompt keep all of ``text`` as its prefix (the prompt builder drops a prefix's first lines to
    fit its budget, and with them the snippets)? Given, as many of the prefix's last lines as fit
    under the snippets; else its last ``keep_chars`` characters."""
    query = set(IDENT.findall("\n".join(task.prefix.split("\n")[-window:])))
    scored = []
    for path, text in sorted(project.workspace.items()):
        lines = text.split("\n")
        for start in range(0, max(1, len(lines) - window + 1), max(1, window // 2)):
            chunk = lines[start:start + window]
            names = set(IDENT.findall("\n".join(chunk)))
            scored.append((-len(query & names) / max(1, len(query | names)), path, start, chunk))
    header = "".join(f"# {Path(path).name}\n" + "".join(f"# {line}\n" for line in chunk)
                     for _, path, _, chunk in sorted(scored)[:k])
    if fits is not None:
        lines = task.prefix.split("\n")
        lo, hi = 1, len(lines)  # the cursor's line always; at most all of them
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(header + "\n".join(lines[-mid:])):
                lo = mid
            else:
                hi = mid - 1
        return header + "\n".join(lines[-lo:])
    tail = task.prefix[-keep_chars:]
    if len(tail) < len(task.prefix):
        tail = tail[tail.find("\n") + 1:] if "\n" in tail else tail
    return header + tail


def without_context(engine, tasks: list[Task], run, projects: dict) -> dict[int, dict]:
    """``{task index: {"useful_no_project": bool, "useful_no_cache": bool, "useful_retrieval": bool, ...}}``:
    each task completed constrained without its project, with the cache model off, and with the
    cache model off but retrieved snippets of its project in the prompt (:func:`retrieved_prefix`).
    ``run(index, task) -> Completion``; ``projects``: package folder -> ProjectContext. Grouped so
    that the engine's counts change twice in all, not per task."""
    out: dict[int, dict] = {i: {} for i, t in enumerate(tasks) if t.kind == KIND}
    for i, fields in out.items():
        res = run(i, tasks[i])
        fields.update(useful_no_project=useful(res.text, tasks[i].target), text_no_project=res.text)
    old = engine.settings
    engine.update_settings(replace(old, context=replace(old.context, cache_model=False)))
    try:
        for i, fields in out.items():
            res = run(i, tasks[i])
            fields.update(useful_no_cache=useful(res.text, tasks[i].target), text_no_cache=res.text)
            project = projects[str(Path(tasks[i].path).parent)]
            suffix = tasks[i].suffix

            def fits(text: str, suffix=suffix) -> bool:
                return engine.builder.build(text, suffix).prefix_chars == len(text)

            res = run(i, replace(tasks[i], prefix=retrieved_prefix(tasks[i], project, fits=fits)))
            fields.update(useful_retrieval=useful(res.text, tasks[i].target), text_retrieval=res.text)
    finally:
        engine.update_settings(old)
    return out


def summarize_workspace(rows: list[dict]) -> dict:
    """``useful`` with the project, without it and with the cache model off (shares of the tasks),
    and ``context_gain`` (with the project / cache off; 0 when neither is useful)."""
    sub = [r for r in rows if r["kind"] == KIND]
    if not sub:
        return {}
    n = len(sub)
    with_project = sum(useful(r["text"], r["target"]) for r in sub)
    no_project = sum(bool(r.get("useful_no_project")) for r in sub)
    no_cache = sum(bool(r.get("useful_no_cache")) for r in sub)
    retrieval = sum(bool(r.get("useful_retrieval")) for r in sub)
    return {
        "useful_with_project": round(with_project / n, 4),
        "useful_no_project": round(no_project / n, 4),
        "useful_no_cache": round(no_cache / n, 4),
        "useful_retrieval": round(retrieval / n, 4),
        "context_gain": round(with_project / no_cache, 3) if no_cache else (float("inf") if with_project else 0.0),
        "packages": len({str(Path(r["path"]).parent) for r in sub}),
    }


def report_lines(report: dict) -> list[str]:
    """The report.md section of the ``workspace`` kind (nothing when the run had none)."""
    c = report["constrained"].get("workspace")
    if not c:
        return []
    return ["", "## Workspace (project context)", "",
            (f"{report['constrained']['by_kind'][KIND]['n']} tasks in {c['packages']} packages; useful = shown "
             "and exact or edit similarity >= 0.7"), "",
            "| constrained | useful |", "|---|---|",
            f"| with the project (siblings) | {c['useful_with_project']} |",
            f"| without the project (document only) | {c['useful_no_project']} |",
            f"| cache model off | {c['useful_no_cache']} |",
            f"| cache model off, retrieved snippets of the project in the prompt | {c.get('useful_retrieval')} |", "",
            f"context_gain (with the project / cache off): **{c['context_gain']}**"]
