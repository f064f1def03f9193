"""The constraint modes and the rule table that selects one from a fingerprint vector (the "Mode
rules" table of :mod:`engine.fingerprint`), with the feature names and their one-line definitions."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

FEATURES: tuple[str, ...] = (
    "in_call_args",
    "in_string",
    "in_fstring_field",
    "in_comment",
    "in_docstring",
    "at_line_start",
    "after_block_opener",
    "in_def_signature",
    "in_class_body",
    "in_import",
    "http_client_in_scope",
    "subprocess_in_scope",
    "file_io_in_scope",
    "test_code",
    "bracket_depth",
    "indent_depth",
)

FEATURE_DOCS: dict[str, str] = {
    "in_call_args": "the innermost open bracket of the innermost code context is a call's '(' (closed or not; "
                    "inside an f-string replacement field only brackets opened in the field count)",
    "in_string": "inside a string literal (also a docstring, also the literal text of an f-string); "
                 "0 inside an f-string replacement field",
    "in_fstring_field": "inside the code (or format spec) of an f-string '{...}' replacement field",
    "in_comment": "inside a '#' comment",
    "in_docstring": "inside a string that is the first statement of a module, class or function body "
                    "(PEP 257); not f-strings or bytes",
    "at_line_start": "only whitespace between the start of the physical line and the cursor",
    "after_block_opener": "at_line_start, at the start of a logical line, and the previous code line is a block "
                          "opener (def/class/if/elif/else/for/while/with/try/except/finally/match/case) ending in ':'",
    "in_def_signature": "inside the parameter list of a def, or its return annotation before the ':'",
    "in_class_body": "the innermost enclosing def/class scope (by indentation) is a class body",
    "in_import": "the statement at the cursor is an 'import' or 'from ... import'",
    "http_client_in_scope": "the document imports requests, httpx, urllib3 or aiohttp (any import form)",
    "subprocess_in_scope": "the document imports subprocess (or names from it)",
    "file_io_in_scope": "the document calls open(...) or imports pathlib, io, yaml, json, csv or shutil",
    "test_code": "the path is test_*.py, *_test.py or under a tests/ directory, or the document imports "
                 "pytest/unittest, or the cursor is inside a function named test_*",
    "bracket_depth": "open bracket depth at the cursor (f-string replacement braces excluded), min(depth, 4) / 4",
    "indent_depth": "indentation level of the cursor line (tab = 1 level; space unit detected, default 4), "
                    "min(level, 8) / 8",
}

MODES = ("code", "call-arguments", "string", "comment", "docstring", "import")

_INDEX = {name: i for i, name in enumerate(FEATURES)}


@dataclass(frozen=True)
class ModePolicy:
    """How a constraint mode generates. ``multiline``: ``"auto"`` (the engine's block-opener rule),
    ``"never"`` or ``"always"``; ``max_tokens``: a cap in tokens, None for the settings default;
    ``code_only``: comments are masked in the completion; ``stop_at_newline``: the completion ends at
    the end of the line."""

    mode: str
    multiline: str
    max_tokens: int | None
    code_only: bool
    stop_at_newline: bool
    description: str


POLICIES: dict[str, ModePolicy] = {
    "comment": ModePolicy("comment", "never", None, False, True,
                          "prose inside a '#' comment, to the end of the line"),
    "docstring": ModePolicy("docstring", "auto", None, False, False,
                            "prose inside a docstring; may span lines"),
    "string": ModePolicy("string", "never", None, False, True,
                         "the rest of a string literal on this line (the lexer knows where it closes)"),
    "import": ModePolicy("import", "never", 16, True, True,
                         "a short single-line import: module and names"),
    "call-arguments": ModePolicy("call-arguments", "never", None, True, True,
                                 "the arguments of an open call, on this line, no comments"),
    "code": ModePolicy("code", "auto", None, True, False,
                       "code; a block body may follow a block opener (multiline auto), no comments"),
}


@dataclass(frozen=True)
class Fingerprint:
    """The fingerprint of one cursor position. ``vector``: float32 ``[16]``, values in [0, 1],
    indexed like :data:`FEATURES` (read-only); ``mode`` one of :data:`MODES`; ``policy`` that mode's
    :class:`ModePolicy`; ``reasons``: why this mode, human-readable (for ``explain``)."""

    vector: np.ndarray
    mode: str
    policy: ModePolicy
    reasons: tuple[str, ...]

    def as_dict(self) -> dict:
        """JSON-ready: ``{"features": {name: value}, "mode": ..., "policy": {...}, "reasons": [...]}``."""
        return {
            "features": {name: float(v) for name, v in zip(FEATURES, self.vector.tolist())},
            "mode": self.mode,
            "policy": asdict(self.policy),
            "reasons": list(self.reasons),
        }

    def __getitem__(self, name: str) -> float:
        """The value of the feature called ``name`` (raises KeyError for an unknown name)."""
        return float(self.vector[_INDEX[name]])


def select_mode(vector) -> tuple[str, ModePolicy, tuple[str, ...]]:
    """The mode rule table of the module docstring applied to a fingerprint vector (array-like of 16
    floats in :data:`FEATURES` order; a feature is on when > 0.5). Returns ``(mode, policy,
    reasons)``. Raises ValueError when ``vector`` does not hold exactly 16 numbers (API misuse)."""
    try:
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"select_mode needs 16 numbers in FEATURES order, got {vector!r:.80}") from exc
    if v.shape != (len(FEATURES),):
        raise ValueError(f"select_mode needs 16 numbers in FEATURES order (engine.fingerprint.FEATURES), "
                         f"got shape {tuple(v.shape)}")
    on = {name: bool(v[i] > 0.5) for i, name in enumerate(FEATURES)}
    if on["in_comment"]:
        mode, why = "comment", ["rule 1: in_comment=1, the cursor is inside a '#' comment"]
    elif on["in_docstring"]:
        mode, why = "docstring", ["rule 2: in_docstring=1, the string is the first statement of a body (PEP 257)"]
    elif on["in_string"]:
        mode, why = "string", ["rule 3: in_string=1, the cursor is inside a string literal"]
    elif on["in_import"]:
        mode, why = "import", ["rule 4: in_import=1, the statement is an import"]
    elif on["in_call_args"]:
        mode, why = "call-arguments", ["rule 5: in_call_args=1, the innermost open bracket is a call's '('"]
        if on["in_fstring_field"]:
            why.append("the call is inside an f-string replacement field (code)")
    else:
        mode, why = "code", ["rule 6: no comment, docstring, string, import or call-argument context"]
        if on["in_fstring_field"]:
            why.append("in_fstring_field=1: the replacement field is code")
        if on["after_block_opener"]:
            why.append("after_block_opener=1: a block body may follow (multiline auto)")
        if on["in_def_signature"]:
            why.append("in_def_signature=1: parameters or return annotation of a def")
    policy = POLICIES[mode]
    why.append(f"policy: multiline {policy.multiline}, max_tokens {policy.max_tokens or 'default'}, "
               f"code_only {policy.code_only}, stop_at_newline {policy.stop_at_newline}")
    return mode, policy, tuple(why)
