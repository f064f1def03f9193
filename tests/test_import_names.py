"""Names must exist after ``from MODULE import`` (monitor-guided decoding, Agrawal et al. 2023): the
member-access monitor's import form, :class:`engine.monitors.member.ImportedName`, with the names of
:func:`engine.signatures.import_names` (jedi's attributes and submodules of the module, with what its
Python source binds). A newcomer's ``from collections import `` got ``dataclass`` (an ImportError).
Soundness on real code: tests/test_monitor_soundness.py (``import positions``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.lexing.prefix import PrefixLexer
from engine.monitors.member import ImportedName, MemberAccess
from engine.monitors.setup import monitors_at
from engine.required_arguments import PolicyTable
from engine.signatures import import_names


def _monitor(prefix: str, suffix: str = "\n", path: str | None = None):
    state, _ = PrefixLexer().lex(prefix, " ")
    return monitors_at(prefix, suffix, path, state, PolicyTable.from_config("off")).member


def _refusal(monitor, text: str):
    monitor = monitor.copy()
    for ch in text:
        why = monitor.feed(ch)
        if why is not None:
            return why
    return None if monitor.accepting() else "not accepting"


@pytest.mark.parametrize("prefix", ["from collections import", "from collections import ",
                                    "from collections import OrderedDict, ", "from collections import (deque, "])
def test_a_name_the_module_does_not_have_is_refused(prefix):
    monitor = _monitor(prefix)
    assert isinstance(monitor, ImportedName) and monitor.owner == "collections"
    assert _refusal(monitor, " dataclass\n").rule == "unknown-import"
    for real in (" OrderedDict\n", " defaultdict, Counter\n", " abc\n", " namedtuple as nt\n"):
        assert _refusal(monitor, real) is None, real


def test_the_half_typed_name_is_finished_with_one_the_module_has():
    monitor = _monitor("from collections import Ord")
    assert monitor.typed == "Ord"
    assert _refusal(monitor, "eredDict\n") is None
    assert _refusal(monitor, "inary\n") is not None


def test_a_package_on_disk_offers_its_submodules_and_what_its_source_binds(tmp_path):
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .core import Basket\n\nVERSION = 1\n", encoding="utf-8")
    (pkg / "core.py").write_text("class Basket:\n    pass\n", encoding="utf-8")
    (pkg / "payments").mkdir()
    (pkg / "payments" / "__init__.py").write_text("", encoding="utf-8")
    module, typed, names = import_names("from shop import ", len("from shop import "), str(tmp_path / "main.py"))
    assert (module, typed) == ("shop", "") and {"Basket", "VERSION", "core", "payments"} <= names
    monitor = _monitor("from shop import ", path=str(tmp_path / "main.py"))
    assert _refusal(monitor, "payments\n") is None and _refusal(monitor, "Wallet\n") is not None


@pytest.mark.parametrize("source", ["import math\n", "from somewhere import *\n", "exec('x = 1')\n"])
def test_a_module_without_source_or_with_a_dynamic_namespace_is_open(tmp_path, source):
    if source == "import math\n":  # a C module: its stub may lack another platform's or version's names
        assert import_names("from math import ", len("from math import ")) is None
        return
    (tmp_path / "dyn.py").write_text(source, encoding="utf-8")
    assert import_names("from dyn import ", len("from dyn import "), str(tmp_path / "main.py")) is None


@pytest.mark.parametrize("prefix", ["from distutils.", "from os.pa", "import os.", "import sys, email."])
def test_no_attribute_is_refused_in_an_import_statements_module_path(prefix):
    # a package's submodules need not be imported by it nor listed in its stub (from distutils.tests import ...)
    monitor = _monitor(prefix)
    assert monitor is None or not isinstance(monitor, MemberAccess) or type(monitor).__name__ == "BlockHeader"


@pytest.mark.parametrize("prefix", ['x = "from collections import ', "# from collections import ",
                                    "from collections import x as "])
def test_no_import_monitor_in_a_string_a_comment_or_an_alias(prefix):
    assert not isinstance(_monitor(prefix), ImportedName)


def test_the_newcomers_buffer_gets_a_name_collections_has(tmp_path):
    path = tmp_path / "imports.py"
    path.write_text("from collections import \n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", "--json", f"{path}:1:25"],
                         capture_output=True, text=True, timeout=300, check=True)
    text = json.loads(out.stdout)["text"].strip()
    assert text, "a name was expected"
    name = text.split(",")[0].split()[0]
    subprocess.run([sys.executable, "-c", f"from collections import {name}"], check=True, timeout=60)
