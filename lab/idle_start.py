"""The first request after an idle start: ``python -m lab.idle_start [--spawns 3] [--idle-s 4]``.

A fresh server (``python -m lsp_server``, :class:`lab.replay.Client`) is spawned, a held-out
standard-library document (``json/encoder.py``, cut in a call inside ``_make_iterencode``) is opened at once,
the model loads, nobody asks for ``--idle-s`` seconds, then one inline completion is requested at
the cut: its latency in ms (from sending it to its answer) and the engine's stages
(``fsmComplete/lastEngineRequest``). What a user meets who opens the editor and starts typing a few
seconds later (docs/benchmarks.md, session 23); the replay's ``first_answer`` measures the other case,
typing while the model loads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from .corpus import stdlib_dir
from .replay import Client

CUT_AT = "            if isinstance(value, str):\n"  # the cursor: the start of the next line, indented


def document() -> tuple[str, int, int]:
    """The opened text (the file up to the cursor) and the cursor's line and character (0-based; the
    line is ASCII, so UTF-16 code units are characters)."""
    text = (stdlib_dir() / "json" / "encoder.py").read_text(encoding="utf-8")
    text = text[: text.index(CUT_AT) + len(CUT_AT)] + "                yield buf + _encoder("
    lines = text.split("\n")
    return text, len(lines) - 1, len(lines[-1])


def measure(spawns: int, idle_s: float) -> dict:
    text, line, character = document()
    uri = "untitled:idle-start.py"
    rows = []
    for _ in range(spawns):
        client = Client({})
        try:
            client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                    "text": text}})
            time.sleep(idle_s)
            t0 = time.perf_counter()
            client.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                             "position": {"line": line, "character": character},
                                                             "context": {"triggerKind": 1}})
            latency = (time.perf_counter() - t0) * 1e3
            record = client.request("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}}).get("result") or {}
        finally:
            client.close()
        rows.append({"latency_ms": round(latency, 1), "stages_ms": record.get("timingsMs") or {}})
    return {"spawns": spawns, "idle_s": idle_s, "latency_ms_p50": round(statistics.median(r["latency_ms"] for r in rows), 1),
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.idle_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=4.0, help="seconds between the open and the request")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.spawns, args.idle_s), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
