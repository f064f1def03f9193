"""What a completion request asks for, decided before decoding (:func:`plan_request`).

The request's own values win, then the fingerprint's *mode policy* (:mod:`engine.fingerprint`:
how a completion is shaped in this mode), then the settings. Texts are ``\n``-normalised here.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import lexing
from .api import CompletionRequest
from .settings import Settings
from .text import dominant_eol, normalize_eol


def wants_multiline(prefix: str, suffix: str, setting: str) -> bool:
    """The shape rule: multi-line only on an empty (whitespace-only) line right after a block opener ``:``;
    single-line mid-line and inside brackets. ``setting``: ``"auto" | "always" | "never"``."""
    if setting == "always":
        return True
    if setting == "never":
        return False
    line_start = prefix.rfind("\n") + 1
    if prefix[line_start:].strip() or suffix.split("\n", 1)[0].strip():
        return False
    before = prefix[:line_start].rstrip()
    # last code line, ignoring comments after the colon
    last = before.rsplit("\n", 1)[-1]
    code = last.split("#", 1)[0].rstrip() if "#" in last and "'" not in last and '"' not in last else last.rstrip()
    return code.endswith(":")


def _opens_an_item(prefix: str) -> bool:
    """Does the cursor's line end (blanks aside) in an opening bracket or a comma, where the next
    item may go on a line of its own (a wrapped argument list)? After an argument, a completion
    that starts a new line only closes brackets there (``\\n    )``), which no one asks for."""
    line = prefix[prefix.rfind("\n") + 1:].rstrip(" \t")
    return not line or line.endswith(("(", "[", "{", ","))


@dataclass
class Plan:
    """What one request asks for, decided before decoding: the ``\\n``-normalised ``prefix`` and
    ``suffix``, the document's line ending ``eol``, the fingerprint ``fp`` (constrained runs), the
    shape (``multiline``; ``wrap_ok``: a single-line completion may start on the next line, as
    an argument list may right after its ``(`` or a ``,``; ``single_line``: the editor shows one line only), the lexical ``context``
    at the cursor (code, comment or string; :func:`engine.lexing.cursor_context`) and the sampling
    settings."""

    prefix: str
    suffix: str
    eol: str
    constrained: bool
    multiline: bool
    wrap_ok: bool
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    context: lexing.Context
    single_line: bool = False
    fp: object = None

    @property
    def in_code(self) -> bool:
        return self.context.kind == lexing.CODE

    @property
    def line_suffix(self) -> str:
        """The cursor's line after the cursor."""
        return self.suffix.split("\n", 1)[0]

    @property
    def cursor_line(self) -> str:
        """The cursor's line before the cursor."""
        return self.prefix[self.prefix.rfind("\n") + 1:]


def plan_request(req: CompletionRequest, s: Settings) -> Plan:
    """The request's shape: normalised text, fingerprint (its mode policy), line or block,
    token budget and sampling settings (request values over the mode policy over settings ``s``)."""
    prefix, suffix = normalize_eol(req.prefix), normalize_eol(req.suffix)
    constrained = req.constraints and s.constraints.enabled
    fp = None
    if constrained:
        from .fingerprint import fingerprint

        fp = fingerprint(prefix, suffix, req.path)
    mode_policy = fp.policy if fp is not None else None
    context = lexing.cursor_context(prefix)
    if req.single_line:
        multiline = False
    elif req.multiline is None and context.kind != lexing.CODE:
        multiline = False  # in a comment or string: the rest of its line
    elif req.multiline is not None:
        multiline = req.multiline
    elif mode_policy is not None and mode_policy.multiline in ("never", "always") \
            and s.generation.multiline == "auto":
        multiline = mode_policy.multiline == "always"
    else:
        multiline = wants_multiline(prefix, suffix, s.generation.multiline)
    budget = mode_policy.max_tokens if mode_policy is not None and mode_policy.max_tokens else None
    max_tokens = req.max_tokens or budget or (
        s.generation.max_tokens_multiline if multiline else s.generation.max_tokens)
    return Plan(
        prefix=prefix, suffix=suffix, eol=dominant_eol(req.prefix + req.suffix), constrained=constrained,
        multiline=multiline, wrap_ok=not req.single_line and fp is not None and fp.mode == "call-arguments"
        and _opens_an_item(prefix),
        max_tokens=max_tokens, context=context, single_line=req.single_line,
        temperature=s.generation.temperature if req.temperature is None else req.temperature,
        top_p=s.generation.top_p if req.top_p is None else req.top_p, seed=req.seed or s.generation.seed, fp=fp)
