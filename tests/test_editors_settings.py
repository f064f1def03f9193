"""The VS Code extension contributes every server setting, with the server's default, and nothing else.

``engine.settings.to_wire()`` is the source of truth; ``vscode-extension/package.json`` contributes
``fsmComplete.<dotted camelCase path>`` for each of its leaves. ``fsmComplete.interpreter`` and
``fsmComplete.trace.server`` are read by the extension itself and never sent to the server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.settings import from_wire, to_wire

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_JSON = ROOT / "vscode-extension" / "package.json"
SECTION = "fsmComplete"
CLIENT_ONLY = {"interpreter", "trace.server"}
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """``{"generation.maxTokens": 48, ...}`` for a nested settings dict."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(leaves(value, path + "."))
        else:
            out[path] = value
    return out


@pytest.fixture(scope="module")
def contributed() -> dict[str, dict]:
    manifest = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    assert all(key.startswith(SECTION + ".") for key in properties), "settings outside the fsmComplete section"
    return {key[len(SECTION) + 1 :]: schema for key, schema in properties.items()}


@pytest.fixture(scope="module")
def server() -> dict[str, object]:
    return leaves(to_wire())


def test_every_server_setting_is_contributed_with_the_same_default(contributed, server) -> None:
    missing = sorted(set(server) - set(contributed))
    assert not missing, f"server settings without an fsmComplete.* setting in package.json: {missing}"
    for key, default in server.items():
        schema = contributed[key]
        assert "default" in schema, f"fsmComplete.{key} has no default"
        value = schema["default"]
        # JSON has one number type: 0 stands for 0.0; a boolean is never a number here
        same_type = type(value) is type(default) or (type(default) is float and type(value) is int)
        assert value == default and same_type, (
            f"fsmComplete.{key}: package.json default {schema['default']!r}, server default {default!r}"
        )


def test_every_contributed_setting_is_a_server_setting_or_client_only(contributed, server) -> None:
    unknown = sorted(set(contributed) - set(server) - CLIENT_ONLY)
    assert not unknown, f"package.json contributes settings the server does not have: {unknown}"
    missing = sorted(CLIENT_ONLY - set(contributed))
    assert not missing, f"the extension's own settings are missing: {missing}"


def test_contributed_types_match_the_server_types(contributed, server) -> None:
    for key, default in server.items():
        expected = JSON_TYPES[type(default)]
        actual = contributed[key].get("type")
        assert actual == expected, f"fsmComplete.{key}: {actual!r} in package.json, the server reads a {expected}"


def test_enums_and_bounds_admit_the_default(contributed, server) -> None:
    for key, default in server.items():
        schema = contributed[key]
        if "enum" in schema:
            assert default in schema["enum"], f"fsmComplete.{key}: default {default!r} not in its enum"
        if "minimum" in schema:
            assert default >= schema["minimum"], f"fsmComplete.{key}: default below its minimum"
        if "maximum" in schema:
            assert default <= schema["maximum"], f"fsmComplete.{key}: default above its maximum"


def test_the_contributed_defaults_read_back_without_problems(contributed, server) -> None:
    """What the extension sends (its defaults as a nested tree) is accepted by the server as is."""
    tree: dict = {}
    for key in server:
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = contributed[key]["default"]
    settings, problems = from_wire(tree)
    assert problems == []
    assert to_wire(settings) == to_wire()
