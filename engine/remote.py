"""A completion decoded by a serving engine elsewhere (vLLM): the client's two halves.

:func:`prepare` does everything before decoding where the document lives: the plan, the
:class:`engine.spec.ConstraintSpec` (jedi, the lexer) and the FIM prompt's token ids. The server
decodes ``prompt_ids`` greedily or by sampling, with the spec enforced per step
(:mod:`fsm_complete.vllm`), and returns the token ids. :func:`settle` replays those ids through
the same constraint code (:func:`engine.constrained.replay`) and finishes the text exactly as the
in-process engine does (:meth:`engine.complete.Engine.finish_for_editor`).

Differences from in-process decoding, by construction: no backtracking after a dead end (the row
stops instead), no project-context cache mixing and no speculative drafts (a greedy result does not
depend on them... the cache mixing does: turn ``context.cacheModel`` off to compare), and the
server's own model kernels (greedy ties may break differently).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .api import Completion, CompletionRequest, StopReason
from .constrained import RowTables, replay
from .decode_loop import Decoding, Start
from .plan import Plan, plan_request
from .prepare import healing_spec
from .spec import ConstraintSpec
from .stages import Stages


@dataclass
class RemoteRequest:
    """One completion as a serving engine gets it: the FIM prompt's token ids, the constraint
    ``spec`` (None: unconstrained), the token budget, the stop token ids and the sampling settings;
    and the client's own state for :func:`settle` (``req``, ``plan``, ``start``, ``result``)."""

    prompt_ids: list[int]
    spec: ConstraintSpec | None
    max_tokens: int
    stop_ids: list[int]
    temperature: float
    top_p: float
    seed: int
    req: CompletionRequest = field(repr=False, default=None)
    plan: Plan = field(repr=False, default=None)
    start: Start = field(repr=False, default=None)
    result: Completion = field(repr=False, default=None)

    def sampling(self, spec_key: str = "fsm_spec") -> dict:
        """Keyword arguments of vLLM's ``SamplingParams`` (also the OpenAI completions body's
        fields; the spec goes in ``extra_args`` / ``vllm_xargs`` under ``spec_key`` as JSON)."""
        out = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
               "seed": self.seed, "stop_token_ids": list(self.stop_ids), "skip_special_tokens": False,
               "logprobs": 0}  # the sampled token's (the confidence score; see settle)
        if self.spec is not None:
            out["extra_args"] = {spec_key: self.spec.to_json()}
        return out


def prepare(engine, req: CompletionRequest) -> RemoteRequest | Completion:
    """The :class:`RemoteRequest` for ``req`` on a loaded ``engine`` (its tokenizer, FIM template,
    FSM index and settings; the model itself is not run), or the finished :class:`Completion` when
    nothing is to be decoded (a ``.`` typed in a comment)."""
    req = engine.scalar_request(req)
    plan = plan_request(req, engine.settings)
    result = Completion(text="", multiline=plan.multiline, cursor_context=plan.context.kind)
    if req.trigger_character is not None and not plan.in_code:
        result.stop_reason = StopReason.NOT_CODE
        return result
    if plan.fp is not None:
        result.fingerprint = plan.fp.as_dict()
    stages = Stages()
    start = engine.constraint_start(req, plan, result, stages)
    spec = start.spec
    prompt = engine.builder.build(plan.prefix[: len(plan.prefix) - len(start.heal)], plan.suffix)
    stop_ids = sorted(set(engine.builder.stop_ids) | set(engine.index.vocab.eos_ids))
    if spec is None and start.heal:  # unconstrained: the server's logits processor still heals
        spec = healing_spec(plan, start.heal, stop_ids=stop_ids, stop_tokens=engine.builder.tpl.stop_tokens,
                            vocab_digest=engine.vocab_digest)
    return RemoteRequest(list(prompt.ids), spec, plan.max_tokens, stop_ids, plan.temperature, plan.top_p, plan.seed,
                         req, plan, start, result)


def tables_of(engine) -> RowTables:
    """The engine's own tables as :class:`engine.constrained.RowTables` (no copy;
    :meth:`engine.complete.Engine.row_tables`)."""
    return engine.row_tables()


def settle(engine, remote: RemoteRequest, token_ids, finished_by_length: bool = False, logprobs=None
           ) -> Completion:
    """The :class:`Completion` of ``remote`` from the token ids the server decoded (a trailing
    stop token included or not): replayed through the constraints, finished as in process.
    ``finished_by_length``: the server stopped at ``max_tokens``. ``logprobs``: the log-probability
    of each returned token under the distribution it was sampled from (vLLM with
    ``--logprobs-mode processed_logprobs``: after the constraints' mask, as in process; the
    confidence score is None without them)."""
    import torch

    req, plan, start, result = remote.req, remote.plan, remote.start, remote.result
    ids = [int(t) for t in token_ids]
    if remote.spec is not None:
        dec = replay(remote.spec, tables_of(engine), ids, finished_by_length).dec
    else:
        dec = _unconstrained(engine, plan, ids, finished_by_length)
    result.tokens = result.decoded_tokens = len(dec.gen)
    if logprobs is not None and len(logprobs) >= len(dec.gen):
        dec.logprobs = [torch.tensor(float(v)) for v in logprobs[: len(dec.gen)]]
    result.prompt_tokens = len(remote.prompt_ids)
    engine.finish_for_editor(req, plan, start, dec, engine.surroundings(plan, start), result)
    return result


def _unconstrained(engine, plan: Plan, ids: list[int], finished_by_length: bool) -> Decoding:
    """The decoded text of an unconstrained request: up to the first stop id, with the stop rules."""
    tokens, stop_ids = engine.index.vocab.tokens, set(engine.builder.stop_ids) | set(engine.index.vocab.eos_ids)
    dec = Decoding(sem=None)
    dec.stop = StopReason.MAX_TOKENS
    for tok in ids:
        if tok in stop_ids:
            dec.stop = StopReason.EOS
            break
        dec.gen.append(tok)
        dec.text = b"".join(tokens[t] or b"" for t in dec.gen).decode("utf-8", "ignore")
        dec.ends.append(len(dec.text))
        dec.accepting.append(len(dec.text))
        if engine.stops_after(dec, plan):
            break
    if dec.stop == StopReason.MAX_TOKENS and not finished_by_length and len(dec.gen) < plan.max_tokens:
        dec.stop = StopReason.EOS
    engine.budget_cut(dec, plan)
    return dec


# -- the vLLM backend (settings model.backend = "vllm") ----------------------------------------------


class RemoteModel:
    """Stands for the model in :class:`engine.model.LoadedModel` when a vLLM server decodes: the
    checkpoint's ``config`` (from its config.json; no weights are loaded) and the server's ``client``."""

    def __init__(self, config, client: VllmClient):
        self.config = config
        self.client = client


class RequestCancelled(Exception):
    """The request's cancel event was set while the server decoded; its connection was closed, so
    the server aborts it (vLLM's ``with_cancellation``: a client that disconnects aborts its request)."""


class VllmClient:
    """A vLLM server's OpenAI-compatible ``/v1/completions`` (``url``: its base URL, ``http`` or
    ``https``), asked for token ids in and out (``prompt`` as ids, ``return_token_ids``) with the spec
    in ``vllm_xargs``. ``timeout``: seconds to connect and per read (a server that hangs costs at most
    that). A request whose ``cancel`` event is set is dropped within :attr:`CANCEL_POLL_S` seconds by
    closing its connection, which makes vLLM abort it (no tokens decoded for nobody).

    Raises :class:`engine.errors.BackendUnavailable` when the server does not answer (down, killed
    mid-request, a connection reset) and :class:`engine.errors.ModelError` when it refuses a request."""

    CANCEL_POLL_S = 0.02

    def __init__(self, url: str, timeout: float = 30.0):
        from urllib.parse import urlsplit

        from .errors import ModelError

        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ModelError(f"model.url {url!r} is not an http(s) URL; use the vLLM server's base URL, "
                             "e.g. http://127.0.0.1:8000")
        self._scheme, self._host, self._port, self._base = parts.scheme, parts.hostname, parts.port, parts.path
        self.timeout = timeout
        self._model: str | None = None

    def _call(self, path: str, body: dict | None = None, cancel=None) -> dict:
        """``GET`` (``body`` None) or ``POST`` ``path`` and the JSON answer. ``cancel``: a
        :class:`threading.Event`; when it is set the connection is shut down and
        :class:`RequestCancelled` raised."""
        import http.client
        import json
        import socket
        import threading

        from .errors import BackendUnavailable, ModelError

        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout)
        done = threading.Event()

        def watch() -> None:  # closes the socket under a blocked read when the request is cancelled
            while not done.is_set():
                if cancel.wait(self.CANCEL_POLL_S):
                    sock = conn.sock
                    if sock is not None and not done.is_set():
                        try:
                            sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return

        watcher = None
        if cancel is not None:
            watcher = threading.Thread(target=watch, name="fsm-complete-vllm-cancel", daemon=True)
        try:
            data = None if body is None else json.dumps(body).encode("utf-8")
            conn.request("GET" if data is None else "POST", self._base + path, body=data,
                         headers={"Content-Type": "application/json"})
            if watcher is not None:
                watcher.start()
            response = conn.getresponse()
            raw = response.read()
            if cancel is not None and cancel.is_set():
                raise RequestCancelled()
            if response.status != 200:
                detail = raw.decode("utf-8", "replace")[:500]
                raise ModelError(f"the vLLM server at {self.url} refused {path}: HTTP {response.status} {detail}")
            return json.loads(raw.decode("utf-8"))
        except (OSError, http.client.HTTPException) as exc:
            if cancel is not None and cancel.is_set():
                raise RequestCancelled() from exc
            raise BackendUnavailable(
                f"the vLLM server at {self.url} did not answer ({type(exc).__name__}: {exc}); completions are "
                "empty until it is back. Start it with `python -m vllm.entrypoints.openai.api_server --model "
                "MODEL_DIR --dtype float32` in the environment of scripts/vllm-env.sh (docs/scale.md), or set "
                "model.backend to \"auto\"") from exc
        except ValueError as exc:
            raise ModelError(f"the vLLM server at {self.url} answered {path} with something that is not JSON: "
                             f"{exc}") from exc
        finally:
            done.set()
            conn.close()

    def model_name(self) -> str:
        """The served model's name (the first of ``/v1/models``; asked until one answer names one)."""
        if self._model is None:
            from .errors import ModelError

            models = self._call("/v1/models").get("data") or []
            if not models:
                raise ModelError(f"the vLLM server at {self.url} serves no model")
            self._model = str(models[0]["id"])
        return self._model

    def body(self, remote: RemoteRequest) -> dict:
        """The ``/v1/completions`` request body of ``remote``: the prompt as token ids, token ids
        asked back, the sampling settings, the spec (if any) under ``vllm_xargs``."""
        body = {"model": self.model_name(), "prompt": list(remote.prompt_ids), "return_token_ids": True}
        sampling = remote.sampling()
        extra = sampling.pop("extra_args", None)
        body.update(sampling)
        if extra:
            body["vllm_xargs"] = extra
        return body

    def decode(self, remote: RemoteRequest, cancel=None) -> tuple[list[int], bool, list | None]:
        """The token ids the server decoded for ``remote``, whether it stopped at ``max_tokens`` and
        each token's log-probability (None when the server sent none). ``cancel``: see :meth:`_call`
        (raises :class:`RequestCancelled`)."""
        from .errors import ModelError

        answer = self._call("/v1/completions", self.body(remote), cancel)
        try:
            choice = answer["choices"][0]
            ids = [int(t) for t in choice.get("token_ids") or []]
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            return ids, choice.get("finish_reason") == "length", logprobs
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ModelError(f"the vLLM server at {self.url} answered without token ids: {str(answer)[:300]}") from exc


def load_remote(settings):
    """The :class:`engine.model.LoadedModel` of the vLLM backend: the served checkpoint's tokenizer
    and config from ``settings.model_dir()`` (the same files the server reads), a
    :class:`RemoteModel` for the model. Raises :class:`engine.errors.ModelError` with the fix."""
    import json
    from types import SimpleNamespace

    import torch

    from .errors import ModelError
    from .model import LoadedModel, _load_tokenizer

    url = settings.model.url.strip()
    if not url:
        raise ModelError("model.backend is \"vllm\" but model.url is empty; set it to the vLLM server's base URL "
                         "(e.g. http://127.0.0.1:8000)")
    path = settings.model_dir()
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"model directory {path} has no readable config.json; point model.path at the served "
                         "checkpoint's directory (its tokenizer and config are read here)") from exc
    tokenizer = _load_tokenizer(path)
    window = int(config.get("max_position_embeddings") or config.get("n_positions") or 2048)
    model = RemoteModel(SimpleNamespace(**config), VllmClient(url))
    return LoadedModel(model=model, tokenizer=tokenizer, device=torch.device("cpu"), dtype=torch.float32,
                       name=path.name, max_positions=window, parameters=0, format="vllm", path=url, engine="vllm")


def complete_remote(engine, req: CompletionRequest) -> Completion:
    """One completion through the vLLM backend: :func:`prepare`, the server, :func:`settle`."""
    import time

    t0 = time.perf_counter()
    remote = prepare(engine, req)
    if isinstance(remote, Completion):
        return remote
    t1 = time.perf_counter()
    try:
        ids, by_length, logprobs = engine.lm.model.client.decode(remote, remote.req.cancel)
    except RequestCancelled:
        remote.result.cancelled, remote.result.stop_reason = True, StopReason.CANCELLED
        remote.result.timings_ms = {"prepare": round((t1 - t0) * 1e3, 3),
                                    "total": round((time.perf_counter() - t0) * 1e3, 3)}
        return remote.result
    t2 = time.perf_counter()
    result = settle(engine, remote, ids, by_length, logprobs)
    t3 = time.perf_counter()
    result.timings_ms = {"prepare": round((t1 - t0) * 1e3, 3), "server": round((t2 - t1) * 1e3, 3),
                         "finish": round((t3 - t2) * 1e3, 3), "total": round((t3 - t0) * 1e3, 3)}
    return result
