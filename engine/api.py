"""Engine-facing request and result types shared by the CLI, the LSP server and the benchmark.

Positions inside the engine are *code-point offsets* into Python ``str`` objects (0-based); the LSP
layer converts from/to the negotiated position encoding (``lsp_server/convert.py``) and nowhere else.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass
class ProjectContext:
    """Texts around the document, for the project-context cache (:mod:`engine.context`).

    ``documents``: the other open documents, ``workspace``: a bounded slice of the workspace's files
    (:func:`engine.context.workspace.collect`); both map a key (an absolute path, or a URI for an
    unsaved buffer) to the full text. The document being completed may be among them: it is left
    out by the request's ``path``. The engine tokenizes a text only when it changed since the last
    request (compared as strings), so one long-lived object updated in place costs nothing per request.
    """

    documents: dict[str, str] = field(default_factory=dict)
    workspace: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    """What the engine loaded, as ``explain``, ``complete --json``, the server's log and the
    ``fsmComplete/model`` request show it: ``name``, ``parameters`` (count), ``dtype`` (torch's name:
    ``float32``, ...), ``device`` (``cpu``, ``cuda:0``), ``vocab_size`` (tokenizer tokens),
    ``fim_template`` (the family of :data:`engine.fim.TEMPLATES`, or ``declared``), ``fim_source`` (how
    it was chosen: ``setting``, ``checkpoint`` (config.json / GGUF metadata names it), ``metadata``
    (the GGUF's FIM token ids), ``tokenizer`` (its special tokens)), ``format`` (``safetensors`` |
    ``gguf``), ``quantization`` (a GGUF's file type: ``F16``, ``Q8_0``, ...; empty otherwise),
    ``window`` (tokens) and ``path`` (the directory or file loaded)."""

    name: str
    parameters: int
    dtype: str
    device: str
    vocab_size: int
    fim_template: str
    fim_source: str
    format: str
    quantization: str = ""
    window: int = 0
    path: str = ""
    engine: str = "torch"  # the backend that runs it (engine.backends): "torch" | "llama-cpp" | "vllm"

    def as_dict(self) -> dict:
        """JSON-ready, snake_case keys (the ``model_info`` of ``explain`` and ``complete --json``)."""
        return dict(self.__dict__)

    def to_wire(self) -> dict:
        """JSON-ready, camelCase keys (the answer of ``fsmComplete/model``)."""
        return {"name": self.name, "parameters": self.parameters, "dtype": self.dtype, "device": self.device,
                "vocabSize": self.vocab_size, "fimTemplate": self.fim_template, "fimSource": self.fim_source,
                "format": self.format, "quantization": self.quantization, "window": self.window, "path": self.path,
                "engine": self.engine}

    def summary(self, code=str) -> str:
        """One line: ``NAME: 6.5 M parameters, float32 on cpu, vocabulary 8192, FIM template X (how)``
        (``NAME: served by vLLM at URL, ...`` for the vLLM backend). ``code(text)`` quotes the name and
        the template (explain's Markdown puts them in backticks)."""
        if self.format == "vllm":  # engine.remote: the weights live in the vLLM server
            where = f"served by vLLM at {self.path}"
        else:
            fmt = f"GGUF {self.quantization}" if self.format == "gguf" else self.format
            weights = f"weights {self.quantization} as stored" if self.engine == "llama-cpp" else self.dtype
            where = f"{self.parameters / 1e6:.1f} M parameters ({fmt}), {weights} on {self.device}, engine {self.engine}"
        return (f"{code(self.name)}: {where}, vocabulary {self.vocab_size}, "
                f"FIM template {code(self.fim_template)} ({self.fim_source})")


class StopReason(StrEnum):
    """Why decoding ended (``Completion.stop_reason``; a ``str``, so ``== "eos"`` and JSON work)."""

    EOS = "eos"  # the model chose a stop token (end of text, FIM end, file separator)
    NEWLINE = "newline"  # a single-line completion reached a line break
    DEDENT = "dedent"  # a multi-line completion left its block (a line indented less than its first)
    MAX_TOKENS = "max_tokens"  # the token budget ran out
    MAX_TOKENS_CUT = "max_tokens_cut"  # ... and the text was cut back to its last natural end (engine.repetition)
    LOOP = "loop"  # the text started to repeat itself; cut after the loop's first copy (engine.repetition)
    CANCELLED = "cancelled"  # ``CompletionRequest.cancel`` was set
    FSM = "fsm"  # the lexer or a monitor refused every way on (no backtrack left)
    FUSE = "fuse"  # the model wanted what the constraints forbid; stopped at the last valid point
    EMPTY = "empty"  # the budget ran out and nothing usable was left (the text is empty)
    NOT_CODE = "not-code"  # a "." typed in a comment or string triggered the request: no code completion


@dataclass
class TraceStep:
    """One decoding step of ``Completion.trace`` (for ``explain`` and the benchmark).

    ``id``/``text``: the accepted token (None/"" when the step ended decoding); ``allowed``: tokens
    the step's mask left allowed (None when unconstrained); ``mask_us``: µs spent composing and
    applying the mask; ``refused``: candidate tokens the semantic monitors refused; ``masked_top``:
    the model's favourite token id when the mask refused it; ``fuse``: the fuse's action
    (``"bias"``, ``"continue"``, ``"stop"``, ``"safe-continuation"``) when it fired; ``heal``: the
    step re-typed (part of) a healed word (:func:`engine.spec.healed_text`; no fuse there).
    """

    id: int | None = None
    text: str = ""
    allowed: int | None = None
    mask_us: float | None = None
    refused: int = 0
    masked_top: int | None = None
    fuse: str | None = None
    heal: bool = False

    def as_dict(self) -> dict:
        """JSON-ready form: only the fields this step set (the ``--json`` trace)."""
        out = {"allowed": self.allowed, "mask_us": self.mask_us, "refused": self.refused or None,
               "masked_top": self.masked_top, "fuse": self.fuse, "heal": self.heal or None, "id": self.id,
               "text": self.text if self.id is not None else None}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Cut:
    """One stage of finishing cutting the text back (``FinishReport.cuts``): the ``rule`` that cut it
    (:data:`CUT_RULES`), the code points ``kept`` of the ``of`` it had before, and a ``detail`` for a
    reader (the verdict, the names blamed, what the glue or the expression was; "" when none)."""

    rule: str
    kept: int
    of: int
    detail: str = ""

    def as_dict(self) -> dict:
        return {"rule": self.rule, "kept": self.kept, "of": self.of, "detail": self.detail}


# the rules that cut a text, in the order the stages of engine.finish.pipeline run them
CUT_RULES = (
    "line",               # shape: a single-line completion ends at its first line break
    "suffix-overlap",     # shape: the tail the cursor's line already has after the cursor
    "block",              # shape: a multi-line completion ends where it leaves its block
    "suffix-repeat",      # shape: ... or where it repeats the line below the cursor (R6)
    "copies-line-above",  # shape: the cursor's line would copy the line above it (nothing is kept)
    "lexer-stop",         # the last point where the lexer and the monitors may stop
    "whole-word",         # an end that would fuse with the word after the cursor (R12)
    "mid-expression",     # an end inside an expression the model went on writing
    "repeated-argument",  # an argument the call at the cursor was already passed
    "closing",            # a shorter text closed with its missing slots (the safe continuation)
    "validation",         # the longest prefix that compiles in the document
    "line-fix",           # a shorter text whose line a fix finishes
    "monitors",           # the monitors' last word on the final text (names must exist, the block header)
    "undefined-name",     # pyflakes' names judge
    "whole-primary",      # a text cut inside an expression, a lone name or a header without its body
)


@dataclass(frozen=True)
class LineFix:
    """The line finished for the editor (``FinishReport.line_fix``): the first ``kept_pieces``
    token pieces of ``of`` kept, and ``appended`` (closing brackets, a quote, a block opener's ``:``)."""

    kept_pieces: int
    of: int
    appended: str

    def as_dict(self) -> dict:
        return {"kept_pieces": self.kept_pieces, "of": self.of, "appended": self.appended}


@dataclass(frozen=True)
class Undefined:
    """pyflakes' names judge blamed the text (``FinishReport.undefined``): the ``names``, the judge's
    ``rules`` (:mod:`engine.monitors.names_judge`) and ``at``, the code-point offset in the text
    before the cut where a retry should decide otherwise (the blamed name's start, the word's end
    or the ``)`` of a def header; 0 when nothing was kept)."""

    names: tuple[str, ...]
    rules: tuple[int, ...]
    at: int

    def as_dict(self) -> dict:
        return {"names": list(self.names), "rules": list(self.rules), "at": self.at}


RETRY_REASONS = ("undefined-name", "fuse", "refused-in-valid-code")


@dataclass(frozen=True)
class RetryBan:
    """What a retry of the attempt bans and why (``FinishReport.retry_ban``): token id ``token`` at
    decoding step ``step`` (0-based, healed steps included), because of ``reason``
    (:data:`RETRY_REASONS`: the names judge blamed what that token began, the fuse chose it, or the
    text it began was refused in a region that compiles)."""

    step: int
    token: int
    reason: str

    def as_dict(self) -> dict:
        return {"step": self.step, "token": self.token, "reason": self.reason}


@dataclass
class FinishReport:
    """Why the decoded text became the completion's text (:func:`engine.finish.finish`), one field
    per stage; what the retry rule (:meth:`engine.complete.Engine._retry`), ``explain`` and the bench
    read.

    ``cuts``: every :class:`Cut`, in stage order; ``word_only``: the word being typed shown alone
    (the model went on calling it or reading from it); ``closing``: the safe continuation
    appended (the missing policy keywords and closers: ``timeout=10)``; "" none); ``calls``: the
    argument slots of the calls as inserted (:meth:`engine.monitors.slots.Call.describe`; None:
    the monitors did not judge it); ``validation``: the verdict (``ok`` | ``truncated`` |
    ``rejected`` | ``repaired`` (a fix appended) | ``skipped``); ``replace_suffix``: code points
    of the ``\\n``-normalised suffix the text replaces (auto-closed characters it typed itself);
    ``line_fix``: the line finished (:class:`LineFix`); ``undefined``: the names judge's blame
    (:class:`Undefined`); ``refused_in_valid_code``: the text was refused whole in a region that
    compiles (None: not asked: something was kept, or nothing was decoded); ``retry_ban``: what a
    retry bans (:class:`RetryBan`; None: no retry is wanted)."""

    cuts: list[Cut] = field(default_factory=list)
    word_only: bool = False
    closing: str = ""
    calls: list[dict] | None = None
    validation: str = "skipped"
    replace_suffix: int = 0
    line_fix: LineFix | None = None
    undefined: Undefined | None = None
    refused_in_valid_code: bool | None = None
    retry_ban: RetryBan | None = None

    def rules(self) -> list[str]:
        """The rules that cut the text, in order (:data:`CUT_RULES`)."""
        return [c.rule for c in self.cuts]

    def as_dict(self) -> dict:
        """JSON-ready, snake_case keys (``explain``'s and ``complete --json``'s ``finish``)."""
        return {"cuts": [c.as_dict() for c in self.cuts], "word_only": self.word_only, "closing": self.closing,
                "calls": self.calls, "validation": self.validation, "replace_suffix": self.replace_suffix,
                "line_fix": self.line_fix.as_dict() if self.line_fix is not None else None,
                "undefined": self.undefined.as_dict() if self.undefined is not None else None,
                "refused_in_valid_code": self.refused_in_valid_code,
                "retry_ban": self.retry_ban.as_dict() if self.retry_ban is not None else None}


@dataclass
class CompletionRequest:
    """One completion at a cursor.

    ``prefix`` is the document text before the cursor, ``suffix`` the text after it (both full
    documents may be long; the engine truncates them to the model window, keeping the text nearest
    the cursor). Line endings may be ``\\n``, ``\\r\\n`` or ``\\r``; the engine normalises internally
    and answers in the document's dominant line ending.
    """

    prefix: str
    suffix: str = ""
    multiline: bool | None = None  # None: decided by the policy (block opener / empty line => multi)
    max_tokens: int | None = None  # None: settings default
    temperature: float | None = None
    top_p: float | None = None
    constraints: bool = True  # False: unconstrained baseline from the same model
    seed: int = 0
    path: str | None = None  # the document's file path (static resolution, pyproject.toml policy); None: unsaved
    cancel: threading.Event | None = None  # set() stops decoding at the next token
    on_token: Callable[[str], None] | None = None  # streaming: called with each new text piece
    single_line: bool = False  # the editor shows one line only (an LSP CompletionItem): one line, never wrapped
    trigger_character: str | None = None  # what the user typed to trigger the request (LSP triggerCharacter)
    project: ProjectContext | None = None  # other documents' texts (the cache model's outer scopes); None: none
    # computed before anyone asked (work between keystrokes, lsp_server/host.py): the result is kept for the
    # request at this very position (Engine.ready_answer) and marked ``prefetched``
    prefetch: bool = False
    # keeping pace with a typist: past this instant (time.perf_counter(), seconds) decoding ends as if the token
    # budget ran out (cut back to its last natural end); at least one token is decoded, and no retry starts.
    # None: no time limit (lsp_server/host.py sets it from the gaps between the user's keystrokes)
    deadline: float | None = None
    # set once the request was answered without waiting for this decode (its deadline came, or the client cancelled
    # it at the next keystroke) while the work goes on for the keystrokes after it (lsp_server/host.py, carried work):
    # from then on the deadline no longer applies (the full answer is what the next keystrokes take), and the
    # result is kept as one decoded between keystrokes (``prefetched``)
    carried: threading.Event | None = None

    @property
    def carried_on(self) -> bool:
        """Has the request been answered while its work goes on (:attr:`carried` set)?"""
        return self.carried is not None and self.carried.is_set()

    def paced_until(self) -> float | None:
        """The deadline that applies now (``time.perf_counter()`` seconds): :attr:`deadline`, or None
        (no limit) once the work is :attr:`carried` on."""
        return None if self.carried_on else self.deadline

    def options_key(self) -> tuple:
        """What besides the texts decides the answer (budget, sampling, constraints, the file's path):
        two requests with the same texts and key get the same completion, so a recent one may answer
        the other (typing through it, a prefetch)."""
        return (self.constraints, self.multiline, self.max_tokens, self.temperature, self.top_p, self.seed, self.path)

    def __post_init__(self):
        """Raises ``ValueError`` for a budget below 1 token, a temperature that is not a finite number
        >= 0, a seed outside 0 ... 2**64 - 1 (:func:`check_seed`), or a ``top_p`` outside (0, 1] (a NaN reached sampling as a torch error before); None
        means the settings' value."""
        if self.max_tokens is not None:
            check_max_tokens(self.max_tokens)
        if self.temperature is not None:
            check_temperature(self.temperature)
        check_seed(self.seed)
        if self.top_p is not None and not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes 64-bit seeds; a larger one raised mid-request


def check_seed(value: int) -> int:
    """``value`` as a sampling seed; raises ``ValueError`` unless it is a whole number from 0 to
    :data:`SEED_MAX` (the one rule for the engine's requests, the CLI's ``--seed`` and the
    ``generation.seed`` setting)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
        raise ValueError(f"seed must be a whole number from 0 to {SEED_MAX} (2**64 - 1), got {value!r}")
    return value


def check_max_tokens(value: int) -> int:
    """``value`` as a token budget; raises ``ValueError`` unless it is a whole number >= 1 (the one
    rule for the engine's requests and the CLI's ``--max-tokens``)."""
    if isinstance(value, bool) or value < 1:
        raise ValueError(f"max_tokens must be at least 1, got {value!r}")
    return value


def check_temperature(value: float) -> float:
    """``value`` as a sampling temperature; raises ``ValueError`` unless it is a finite number >= 0
    (0: greedy; the one rule for the engine's requests and the CLI's ``--temperature``)."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {value!r}")
    return value


@dataclass
class Completion:
    """Result of :meth:`engine.complete.Engine.complete`.

    This is the completion's final shape, the same for the editor, ``complete`` and ``explain``:
    ``text`` (in the document's dominant line ending) is inserted at the cursor, replacing the
    first ``replace_suffix`` code points of the request's ``suffix`` (auto-closed characters the
    completion typed itself; never past the cursor's line, and only when the resulting document is
    the one validated). In a comment or string (``cursor_context``) the text stays inside it; for a
    ``single_line`` request it is one line. ``timings_ms`` holds
    the request's time per stage in milliseconds (:data:`engine.stages.STAGES`: ``fingerprint``,
    ``lexing``, ``semantics``, ``prompt``, ``prefill``, ``context``, ``forward``, ``mask``,
    ``monitors``, ``sampling``, ``validate``; they add up to ``total``), and ``decode``: the decode
    loop (``forward``, the model's decode steps, plus ``mask``, ``monitors``, ``sampling`` and the
    per-step context mixing). ``trace`` has one :class:`TraceStep` per decoded token, plus the step a fuse
    stopped at.
    """

    text: str
    replace_suffix: int = 0
    multiline: bool = False
    cursor_context: str = "code"  # where the cursor is: "code" | "comment" | "string" (engine.lexing.cursor_context)
    cancelled: bool = False
    stop_reason: StopReason | None = None  # None: not decoded here
    tokens: int = 0
    decoded_tokens: int = 0  # tokens the decode loop committed in all attempts (a step back or a retry's included)
    prompt_tokens: int = 0
    reused_tokens: int = 0  # KV-cache prefix tokens reused from the previous request
    fuses: int = 0
    retries: int = 0  # extra attempts after an empty or names-judged one (Engine._retry; timings_ms covers them all)
    # why each retry ran: the ban that started it, in order (the shown attempt obeys them all; len == retries)
    retry_bans: list[RetryBan] = field(default_factory=list)
    validation: str = ""  # the shown text's verdict: "ok" | "truncated" | "rejected" | "repaired" | "skipped"
    finish: FinishReport = field(default_factory=FinishReport)  # why the decoded text became this text (engine.finish)
    timings_ms: dict[str, float] = field(default_factory=dict)
    trace: list[TraceStep] = field(default_factory=list)
    fingerprint: dict = field(default_factory=dict)  # engine.fingerprint.Fingerprint.as_dict() (constrained runs)
    # the monitors at the cursor (engine.monitors.setup.describe: calls, member access, names, refusals) and the
    # decode loop's fuse events; what finishing did is in ``finish``
    semantics: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)  # the project-context cache: ids counted per scope, steps it mixed in
    typed_through: int = 0  # > 0: the rest of a recent completion the user typed this many characters of (no decoding)
    prefetched: bool = False  # decoded between keystrokes, before the request at its position came (see prefetch)
    # the confidence gate: geometric mean of the kept tokens' probabilities under the final (masked) distribution,
    # in [0, 1]; None when nothing was decoded. Below settings ``generation.min_confidence`` the text is
    # withheld: ``text`` is empty and ``withheld`` holds what would have been shown
    confidence: float | None = None
    withheld: str = ""
    # speculative decoding (engine/speculate.py; greedy only): ids drafted and verified, of them accepted, the
    # multi-token forward passes, the acceptance rate; empty when it did not run
    speculative: dict = field(default_factory=dict)
