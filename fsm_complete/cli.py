"""The ``fsm-complete`` command, the product's front door: ``serve``, ``complete``, ``explain``,
``daemon`` (the model kept loaded for ``complete`` and ``explain``: :mod:`fsm_complete.daemon`), and
the lab's ``fingerprint-stats``, ``train`` and ``bench``.

Every subcommand's flags are declared here; what a subcommand runs is imported when it runs, so
``complete``/``explain``/``serve`` load only the engine and the server, and the lab (:mod:`lab`:
benchmarks, training, corpus statistics) is imported only by its own three subcommands.
stdout carries only results (the completion text, JSON, or the LSP protocol for ``serve``); logs
and progress go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path


def _settings(args):
    from engine.settings import Settings

    s = Settings()
    if getattr(args, "model", None):
        s.model.path = args.model
    if getattr(args, "device", None):
        s.model.device = args.device
    if getattr(args, "dtype", None):
        s.model.dtype = args.dtype
    if getattr(args, "decoder", None):
        s.model.decoder = args.decoder
    if getattr(args, "fim_template", None):
        s.model.fim_template = args.fim_template
    if getattr(args, "backend", None):
        s.model.backend = args.backend
    if getattr(args, "vllm_url", None):  # decode on a vLLM server (docs/scale.md)
        s.model.backend, s.model.url = "vllm", args.vllm_url
    return s


def _serve_http(args) -> int:
    """``serve --http HOST:PORT``: llama-server's /infill and OpenAI's /v1/completions
    (:mod:`fsm_complete.http_api`)."""
    import logging
    import os

    from fsm_complete.http_api import serve_http

    host, _, port = args.http.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        print(f"fsm-complete serve: --http expects HOST:PORT (e.g. 127.0.0.1:8012), got {args.http!r}",
              file=sys.stderr)
        return 2
    settings = _settings(args)
    level = getattr(logging, (args.log_level or "info").upper(), logging.INFO)
    handler = logging.FileHandler(args.log_file, encoding="utf-8") if args.log_file else logging.StreamHandler()
    logging.basicConfig(level=level, handlers=[handler], format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    key = args.api_key or os.environ.get("FSM_COMPLETE_API_KEY", "")
    return serve_http(settings, host.strip("[]"), int(port), key)


def parse_location(spec: str) -> tuple[str, int, int]:
    """``FILE:LINE:COL`` (1-based line and column, as in compiler messages) -> ``(file, line, col)``.

    Raises ValueError with the expected form.
    """
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"expected FILE:LINE:COL with 1-based numbers, got {spec!r}")
    file, line, col = parts[0], int(parts[1]), int(parts[2])
    if line < 1 or col < 1:
        raise ValueError(f"LINE and COL are 1-based, got {line}:{col}")
    return file, line, col


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def position_of(text: str, offset: int) -> tuple[int, int]:
    """The 1-based ``(line, column)`` of code-point ``offset`` in ``text``, the inverse of
    :func:`offset_of`: ``\r\n``, ``\r`` and ``\n`` each end a line (as the file was read)."""
    breaks = _LINE_BREAK.findall(text, 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1, text.rfind("\r", 0, offset) + 1
    return len(breaks) + 1, offset - max(line_start) + 1


def offset_of(text: str, line: int, col: int) -> int:
    """Code-point offset of 1-based ``line``/``col`` in ``text``; clamped to the line's end and the
    document's end (a column past the end of a line means the end of that line)."""
    starts = [0]
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\r" and i + 1 < n and text[i + 1] == "\n":
            i += 1
        if ch in "\r\n":
            starts.append(i + 1)
        i += 1
    if line > len(starts):
        return n
    start = starts[line - 1]
    end = starts[line] if line < len(starts) else n
    line_text = text[start:end].rstrip("\r\n")
    return start + min(col - 1, len(line_text))


def read_location(args) -> tuple[int, str | None, int, str | None]:
    """Read ``args.location`` (``FILE:LINE:COL``, 1-based; FILE ``-``: stdin) without loading the
    engine: ``(exit code, text, code-point offset, absolute path or None for stdin)``. A problem is
    printed to stderr and gives exit code 2 (text None)."""
    from engine.text import decode_source

    try:
        file, line, col = parse_location(args.location)
    except ValueError as exc:
        print(f"fsm-complete {args.command}: {exc}", file=sys.stderr)
        return 2, None, 0, None
    stdin = file == "-"
    shown = "<stdin>" if stdin else file  # as CPython names it in tracebacks
    try:
        if stdin:
            data = sys.stdin.buffer.read()
        else:
            data = Path(file).read_bytes()
        text = decode_source(data)  # PEP 263 / 3120, as CPython reads the file
    except (OSError, ValueError) as exc:
        print(f"fsm-complete {args.command}: cannot read {shown}: {exc}", file=sys.stderr)
        return 2, None, 0, None
    lines = len(_LINE_BREAK.split(text))  # the line after a final line break counts (the cursor may be there)
    if line > lines:
        print(f"fsm-complete {args.command}: line {line} is past the end of {shown} "
              f"({lines} line{'s' if lines != 1 else ''})", file=sys.stderr)
        return 2, None, 0, None
    return 0, text, offset_of(text, line, col), None if stdin else str(Path(file).resolve())


def command_settings(args):
    """The engine settings of a ``complete``/``explain``/``daemon`` command line (its model options)."""
    settings = _settings(args)
    if getattr(args, "required_arguments", None):
        settings.constraints.required_arguments = args.required_arguments
    return settings


def load_engine(settings, who: str = "fsm-complete"):
    """A loaded :class:`engine.complete.Engine` for ``settings``; None when the model does not load
    (the reason printed to stderr after ``who``)."""
    from engine.complete import Engine
    from engine.errors import ModelError

    engine = Engine(settings)
    try:
        engine.load()
    except ModelError as exc:
        print(f"{who}: {exc}", file=sys.stderr)
        return None
    return engine


def answer(engine, args, text: str, offset: int, path: str | None) -> tuple[int, str, str]:
    """Run ``args.command`` (``complete`` or ``explain``) on a loaded engine at code-point ``offset``
    of ``text``: ``(exit code, stdout, stderr)``. The same in this process and in the daemon
    (:mod:`fsm_complete.daemon`), so both print the same thing."""
    from engine.api import CompletionRequest
    from engine.errors import ModelError

    try:
        req = CompletionRequest(prefix=text[:offset], suffix=text[offset:], constraints=not args.no_constraints,
                                multiline=args.multiline, max_tokens=args.max_tokens, temperature=args.temperature,
                                seed=args.seed, path=path)
        result = engine.complete(req)
    except ModelError as exc:
        return 1, "", f"fsm-complete: {exc}\n"
    finally:
        engine.save_tables()
    if args.command == "explain":
        from engine.explain import explanation, to_markdown

        record = explanation(result, engine.index.size, engine.model_name, engine.model_info)
        return 0, (json.dumps(record, indent=2, ensure_ascii=False) if args.json else to_markdown(record)) + "\n", ""
    if not args.json:
        return 0, result.text + ("\n" if not result.text.endswith("\n") else ""), ""
    start_line, start_col = position_of(text, offset)
    end_line, end_col = position_of(text, offset + result.replace_suffix)
    item = {
        "text": result.text,
        "range": {"start": {"line": start_line, "column": start_col}, "end": {"line": end_line, "column": end_col}},
        "constrained": not args.no_constraints,
        "multiline": result.multiline,
        "stop_reason": result.stop_reason,
        "validation": result.validation,
        "finish": result.finish.as_dict(),  # engine.api.FinishReport: the cuts and the rule behind each, retry ban
        "retries": result.retries,
        "retry_bans": [b.as_dict() for b in result.retry_bans],
        "confidence": result.confidence,
        "withheld": result.withheld,
        "tokens": result.tokens,
        "decoded_tokens": result.decoded_tokens,  # every attempt's (a retry's too), within one attempt's budget
        "prompt_tokens": result.prompt_tokens,
        "reused_tokens": result.reused_tokens,
        "fuses": result.fuses,
        "timings_ms": result.timings_ms,
        "speculative": result.speculative,
        "model": engine.model_name,
        "model_info": engine.model_info.as_dict(),
        "trace": [step.as_dict() for step in result.trace],
    }
    return 0, json.dumps(item, indent=2, ensure_ascii=False) + "\n", ""


def cmd_complete(args) -> int:
    """``complete`` and ``explain``: through the daemon when one runs with these settings
    (:mod:`fsm_complete.daemon`), else in this process."""
    code, text, offset, path = read_location(args)
    if code:
        return code
    if path is None:  # stdin: a document of the caller's folder (its imports resolve there, also in the daemon)
        path = os.path.join(os.getcwd(), STDIN_NAME)
    settings = command_settings(args)
    reply = None
    if not args.no_daemon:
        from . import daemon

        reply = daemon.ask(args, settings, text, offset, path)
    if reply is None:
        engine = load_engine(settings)
        if engine is None:
            return 1
        reply = answer(engine, args, text, offset, path)
    code, out, err = reply
    sys.stderr.write(err)
    sys.stdout.write(out)
    return code


def cmd_daemon(args) -> int:
    from . import daemon

    return daemon.command(args, command_settings(args), load_engine, answer)


def cmd_serve(args) -> int:
    from lsp_server import access
    from lsp_server.server import serve

    if getattr(args, "http", None):
        return _serve_http(args)
    tcp = token = None
    if args.tcp:
        try:
            tcp = access.parse_tcp(args.tcp)
            token = access.tcp_token(args.token_file)
        except ValueError as exc:
            print(f"fsm-complete serve: {exc}", file=sys.stderr)
            return 2
    settings = _settings(args)
    if args.log_level:
        settings.log_level = args.log_level
    return serve(settings, tcp=tcp, log_file=args.log_file, token=token)


def cmd_train(args) -> int:
    from lab.train import TrainConfig, train

    cfg = TrainConfig()
    for name in ("work_dir", "out_dir", "corpus_dir", "seed", "data_seed", "steps", "batch_size", "threads", "lr",
                 "warmup_steps", "save_every", "init_from", "source_cap_chars", "corpus_pack"):
        value = getattr(args, name)
        if value is not None:
            setattr(cfg, name, value)
    cfg.bf16 = args.bf16
    cfg.packages = [name for item in args.packages or [] for name in item.split(",") if name]
    cfg.extra_corpus = list(args.extra_corpus or [])
    for item in args.source_share or []:
        name, _, fraction = item.partition("=")
        try:
            cfg.source_shares[name] = float(fraction)
        except ValueError:
            print(f"--source-share {item!r}: expected NAME=FRACTION, e.g. stdlib=0.5", file=sys.stderr)
            return 2
    train(cfg)
    return 0


def cmd_bench(args) -> int:
    from lab import bench

    if args.tokenizer == "qwen":
        from lab.bench_vocab import run_qwen

        report = run_qwen(args)
    else:
        timer = None
        if args.lsp:
            from lab.bench_lsp import lsp_latencies

            def timer(tasks, constrained):
                return lsp_latencies(tasks, constrained=constrained, model=args.model,
                                     speculative=not args.no_speculative)

        report = bench.run_bench(args, lsp_timer=timer)
    bench.print_summary(report)
    return 0


def cmd_fingerprint_stats(args) -> int:
    from lab.fingerprint_stats import cmd_fingerprint_stats

    return cmd_fingerprint_stats(args)


def _kinds_arg(spec: str) -> str:
    """``bench --kinds``: checked by :func:`lab.tasks.parse_kinds` (imported only when the flag is given)."""
    from lab.tasks import parse_kinds

    try:
        parse_kinds(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return spec


def add_fingerprint_stats_parser(sub):
    """Register ``fingerprint-stats DIR [--samples N] [--seed S] [--json]`` on an argparse
    subparsers object; returns the subparser (its ``func`` default is :func:`cmd_fingerprint_stats`)."""
    sp = sub.add_parser("fingerprint-stats",
                        help="mean and variance of each fingerprint feature over random cursor positions in DIR")
    sp.add_argument("dir", metavar="DIR", help="directory of .py files (searched recursively)")
    sp.add_argument("--samples", type=int, default=2000, help="cursor positions to sample (default 2000)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--json", action="store_true", help="the statistics as JSON instead of a table")
    sp.set_defaults(func=cmd_fingerprint_stats)
    return sp


def add_bench_parser(sub):
    """Register ``bench`` and its flags on an argparse subparsers object; returns the subparser
    (its ``func`` default is :func:`cmd_bench`). The kinds are :data:`lab.tasks.ALL_KINDS`."""
    sp = sub.add_parser("bench", help="measure validity and speed, constrained vs unconstrained")
    sp.add_argument("--tasks", type=int, default=200)
    sp.add_argument("--time-limit", dest="time_limit", type=float, default=0.0,
                    help="seconds for the tasks (after the warm-up); the report holds those done by then (0: no limit)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--out", default="bench-out")
    sp.add_argument("--corpus", help="directory of .py files (default: held-out standard-library files; for the "
                    "workspace kind the installed mpmath and fsspec, projects the default model never saw)")
    sp.add_argument("--model", help="Hugging Face checkpoint directory, GGUF file or ollama:NAME[:TAG] "
                                    "(default: the embedded model)")
    sp.add_argument("--device", help="auto, cpu, cuda")
    sp.add_argument("--decoder", choices=["auto", "transformers"],
                    help="auto: the own decoder for Llama/Qwen2/Mistral checkpoints (default); transformers: always")
    sp.add_argument("--backend", choices=["auto", "torch", "llama-cpp"],
                    help="the engine (model.backend; default auto: a GGUF file on llama.cpp when installed)")
    sp.add_argument("--lsp", action="store_true", help="also time the same tasks through `fsm-complete serve`")
    sp.add_argument("--replay", action="store_true",
                    help="type each task's target one character at a time through a real server, as VS Code "
                         "drives it, and report characters saved, latency and answers in time (lab/replay.py)")
    sp.add_argument("--cadence", default="180",
                    help="with --replay: comma-separated mean gaps between keystrokes in ms (default 180; e.g. "
                         "120,180,300 for fast to slow typists)")
    sp.add_argument("--server-settings", dest="server_settings", default="",
                    help="with --replay: JSON settings for the servers typed into, as initializationOptions' "
                         "fsmComplete section (e.g. '{\"generation\": {\"prefetch\": false}}')")
    sp.add_argument("--no-speculative", dest="no_speculative", action="store_true",
                    help="decode without speculative drafts (the baseline for engine/speculate.py)")
    sp.add_argument("--busy-core", dest="busy_core", action="store_true",
                    help="keep one CPU core busy with a separate process during the run (lab/busy.py)")
    sp.add_argument("--tokenizer", choices=["default", "qwen"], default="default",
                    help="qwen: FSM-only measurement on Qwen2.5-Coder's 151k vocabulary")
    sp.add_argument("--kinds", type=_kinds_arg, help="comma-separated task kinds from line,args,block,slots,workspace (default: "
                    "line,args,block, plus slots when the slot corpus has calls; workspace: files of a "
                    "package completed with and without their siblings as project context)")
    sp.add_argument("--exactness", action="store_true",
                    help="FSM only, no model: how many mutated (non-compiling) real files the masks let through "
                         "(exactness.json and report.md in --out)")
    sp.add_argument("--mutants", type=int, default=60, help="--exactness: mutants per mutation kind (default 60)")
    sp.set_defaults(func=cmd_bench)
    return sp


def _checked(convert, check):
    """An argparse type: ``convert`` the text, then ``check`` it (:mod:`engine.api`'s request rules),
    each ``ValueError`` an argparse error."""
    def parse(text: str):
        try:
            return check(convert(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    from engine.api import check_max_tokens, check_seed, check_temperature

    p = _Parser(prog="fsm-complete", description="FSM-constrained Python code completion")
    p.add_argument("--log-level", help="debug, info, warning, error (stderr; serve: also window/logMessage)")
    sub = p.add_subparsers(dest="command", required=True)

    def model_opts(sp):
        sp.add_argument("--model", help="Hugging Face checkpoint directory, GGUF file (Llama family: Llama, Mistral, "
                                        "Qwen2), or ollama:NAME[:TAG] from the local Ollama store (default: the "
                                        "embedded model)")
        sp.add_argument("--device", help="auto, cpu, cuda, cuda:N")
        sp.add_argument("--dtype", help="auto, float32, bfloat16, float16")
        sp.add_argument("--decoder", choices=["auto", "transformers"],
                        help="auto: the own decoder for Llama/Qwen2/Mistral checkpoints, else transformers "
                             "(default); transformers: always transformers (checkpoint directories)")
        sp.add_argument("--backend", choices=["auto", "torch", "llama-cpp"],
                        help="the engine (model.backend): auto (default: a GGUF file on llama.cpp on the CPU when "
                             "llama-cpp-python is installed, else torch), torch, llama-cpp")
        sp.add_argument("--fim-template", dest="fim_template", metavar="NAME",
                        help="fill-in-the-middle template: auto (default: named by the checkpoint, its GGUF metadata "
                             "or its special tokens), fsm-complete, starcoder, qwen, deepseek, codellama")
        sp.add_argument("--vllm-url", dest="vllm_url", metavar="URL",
                        help="decode on the vLLM server at URL running fsm-complete's logits processor "
                             "(model.backend \"vllm\"; --model names the served checkpoint; docs/scale.md)")
        sp.add_argument("--required-arguments", dest="required_arguments", choices=["default", "strict-http", "off"],
                        help="required-argument policy profile")

    sp = sub.add_parser("serve", help="run the language server (stdio by default)")
    sp.add_argument("--tcp", metavar="[HOST:]PORT",
                    help="listen on TCP instead of stdio (host default 127.0.0.1); needs --token-file or "
                         "$FSM_COMPLETE_TOKEN, which the client sends as initializationOptions.token")
    sp.add_argument("--token-file", dest="token_file", metavar="FILE",
                    help="with --tcp: the token's file (first line; mode 600)")
    sp.add_argument("--http", metavar="HOST:PORT",
                    help="serve llama-server's /infill and OpenAI's /v1/completions over HTTP instead of LSP "
                         "(llama.vscode, llama.vim, Continue, Zed; docs/editors.md); loopback only without --api-key")
    sp.add_argument("--api-key", dest="api_key", metavar="KEY",
                    help="with --http: the key every request must send as 'Authorization: Bearer KEY' "
                         "(default: $FSM_COMPLETE_API_KEY)")
    sp.add_argument("--log-file", help="write logs here instead of stderr")
    model_opts(sp)
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("complete", help="print the completion at FILE:LINE:COL (1-based; FILE '-' = stdin)")
    sp.add_argument("location", metavar="FILE:LINE:COL")
    sp.add_argument("--json", action="store_true", help="print the item with its range, timings (ms) and trace")
    sp.add_argument("--no-constraints", action="store_true", help="unconstrained baseline from the same model")
    sp.add_argument("--max-tokens", type=_checked(int, check_max_tokens),
                    help="token budget (at least 1; default: the settings')")
    sp.add_argument("--temperature", type=_checked(float, check_temperature), help="0 (default) greedy; above 0 samples")
    sp.add_argument("--seed", type=_checked(int, check_seed), default=0,
                    help="the sampling seed (temperature above 0): a whole number from 0 to 2**64 - 1")
    ml = sp.add_mutually_exclusive_group()
    ml.add_argument("--multiline", dest="multiline", action="store_true", default=None)
    ml.add_argument("--single-line", dest="multiline", action="store_false")
    sp.add_argument("--no-daemon", dest="no_daemon", action="store_true",
                    help="answer in this process even when `fsm-complete daemon` runs")
    model_opts(sp)
    sp.set_defaults(func=cmd_complete)

    sp = sub.add_parser("explain", help="why the completion at FILE:LINE:COL is what it is: fingerprint, mode, "
                                        "argument slots, masks per step, fuses, verdict")
    sp.add_argument("location", metavar="FILE:LINE:COL")
    sp.add_argument("--json", action="store_true", help="the record as JSON instead of Markdown")
    sp.add_argument("--no-daemon", dest="no_daemon", action="store_true",
                    help="answer in this process even when `fsm-complete daemon` runs")
    model_opts(sp)
    sp.set_defaults(func=cmd_complete, no_constraints=False, multiline=None, max_tokens=None, temperature=None, seed=0)

    sp = sub.add_parser("daemon", help="keep the model loaded in a resident process that `complete` and `explain` "
                                       "answer through (start, stop, status; run: in the foreground)")
    sp.add_argument("action", choices=["start", "stop", "status", "run"])
    sp.add_argument("--idle-minutes", dest="idle_minutes", type=float, default=60.0,
                    help="start/run: exit after this many minutes without a request (default 60; 0: never)")
    model_opts(sp)
    sp.set_defaults(func=cmd_daemon)

    add_fingerprint_stats_parser(sub)

    sp = sub.add_parser("train", help="train the default model (resumable; log in WORK_DIR/train_log.jsonl)")
    sp.add_argument("--work-dir", dest="work_dir")
    sp.add_argument("--out", dest="out_dir", help="where the finished checkpoint goes (default: the package's model)")
    sp.add_argument("--corpus", dest="corpus_dir", help="directory of .py files (default: this Python's stdlib)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--data-seed", dest="data_seed", type=int,
                    help="seed of the training batches (default: --seed); give a continuation run (--init-from) a new "
                         "one so that it does not see the batches of the run it continues")
    sp.add_argument("--steps", type=int)
    sp.add_argument("--batch-size", dest="batch_size", type=int)
    sp.add_argument("--threads", type=int)
    sp.add_argument("--lr", type=float, help="peak learning rate (default 2e-3)")
    sp.add_argument("--warmup-steps", dest="warmup_steps", type=int)
    sp.add_argument("--save-every", dest="save_every", type=int, help="checkpoint every N steps (default 50)")
    sp.add_argument("--bf16", action="store_true", help="bfloat16 autocast for training (about 3x float32 on a CPU)")
    sp.add_argument("--init-from", dest="init_from", metavar="DIR",
                    help="continue from this checkpoint, keeping its tokenizer and shape (e.g. engine/data/default-model)")
    sp.add_argument("--packages", action="append", metavar="NAME[,NAME...]",
                    help="add the .py source of these installed packages to the corpus (held out by file hash)")
    sp.add_argument("--extra-corpus", dest="extra_corpus", action="append", metavar="DIR",
                    help="add another directory of .py files to the corpus (repeatable)")
    sp.add_argument("--corpus-pack", dest="corpus_pack", metavar="DIR",
                    help="train on a corpus pack (python -m lab.corpus_pack build) instead of --corpus/--packages")
    sp.add_argument("--source-cap-chars", dest="source_cap_chars", type=int,
                    help="cap one source's sampling weight at this many characters (0: proportional to size)")
    sp.add_argument("--source-share", dest="source_share", action="append", metavar="NAME=FRACTION",
                    help="draw this fraction of the windows from one source (e.g. stdlib=0.5; repeatable)")
    sp.set_defaults(func=cmd_train)

    add_bench_parser(sub)
    return p


STDIN_NAME = "<stdin>"  # the file name of a stdin document, in the caller's working directory
STDIN = "\x00stdin"  # stands for FILE "-" while argparse reads the arguments; never printed


class _Parser(argparse.ArgumentParser):
    """argparse with its messages naming ``-`` where the arguments held :data:`STDIN` (its
    subcommands' parsers are of the same class)."""

    def error(self, message: str):
        super().error(message.replace(STDIN, "-"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # ``-:LINE:COL`` would look like an option to argparse
    argv = [STDIN + a[1:] if a.startswith("-:") else a for a in argv]
    args = build_parser().parse_args(argv)
    if getattr(args, "location", "").startswith(STDIN):  # back to what the user wrote, for every message after
        args.location = "-" + args.location[len(STDIN):]
    logging.basicConfig(level=getattr(logging, str(args.log_level or "warning").upper(), logging.WARNING), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (``| head``): no traceback, as other CLI tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
