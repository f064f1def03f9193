"""The layers: the editor's runtime (``engine``, ``lsp_server``) never imports the lab (``lab``: benchmarks,
training, corpus statistics) nor the command's front door (``fsm_complete``); the front door imports the
lab only for ``bench``, ``train`` and ``fingerprint-stats``; project imports form no cycle."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "lsp_server", "fsm_complete", "lab")
RUNTIME = ("engine", "lsp_server")
ALIAS = "lsp_server.cli"  # ``python -m lsp_server.cli``: the front door under its old name


def _loaded_after(code: str) -> list[str]:
    """Top-level names of the modules a fresh interpreter holds after running ``code`` (sorted)."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_the_server_loads_neither_the_lab_nor_matplotlib():
    # what ``python -m lsp_server`` imports before it serves (its main is not called)
    loaded = _loaded_after("import lsp_server.__main__, lsp_server.server, engine.complete, engine.explain")
    assert "lsp_server" in loaded and "engine" in loaded
    assert not {"lab", "fsm_complete", "matplotlib"} & set(loaded)


@pytest.mark.parametrize("argv", [["complete", "a.py:1:1"], ["explain", "a.py:1:1", "--json"], ["serve"]])
def test_the_product_commands_do_not_load_the_lab(argv):
    loaded = _loaded_after(f"from fsm_complete.cli import build_parser\nbuild_parser().parse_args({argv!r})\n"
                           "import engine.complete, engine.explain, lsp_server.server")
    assert "fsm_complete" in loaded
    assert not {"lab", "matplotlib"} & set(loaded)


def test_the_lab_loads_only_for_its_commands():
    loaded = _loaded_after("from fsm_complete.cli import build_parser\n"
                           "build_parser().parse_args(['bench', '--kinds', 'line'])")
    assert "lab" in loaded  # --kinds is checked by lab.tasks: the probe above can see a lab import


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = getattr(child, "test", None) if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _project_imports(path: Path, package: str) -> set[str]:
    """Project modules that ``path`` (a module of ``package``) imports anywhere in its body, function-level
    imports included (not those under ``if TYPE_CHECKING:``); relative imports are resolved against ``package``."""
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return {n for n in names if n.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    """``{module: project modules it imports}`` over every module of the four packages (subpackages too);
    a package stands for its ``__init__``."""
    modules: dict[str, tuple[Path, str]] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = (path, ".".join(parts[:-1]))
    # a module's own packages are not edges: Python runs them before any of their modules anyway
    return {name: {d for d in _project_imports(path, package)
                   if d in modules and d != name and not name.startswith(d + ".")}
            for name, (path, package) in modules.items()}


def test_the_runtime_never_imports_the_lab_or_the_front_door():
    for name, deps in _graph().items():
        if name.split(".")[0] in RUNTIME and name != ALIAS:
            assert not {d for d in deps if d.split(".")[0] in ("lab", "fsm_complete")}, name


def test_project_imports_have_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(dep):] + [node, dep]))
            if dep not in state:
                visit(dep, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("module", ["fsm_complete", "lsp_server.cli"])
def test_the_command_runs_under_both_module_names(module):
    run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    for command in ("serve", "complete", "explain", "fingerprint-stats", "train", "bench"):
        assert command in run.stdout
