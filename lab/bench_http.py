"""The HTTP front door against the language server on the bench's tasks (issue 36's targets).

``python -m lab.bench_http [--tasks 40] [--seed 0] [--model M]`` runs the same held-out tasks
(:mod:`lab.tasks`) through a fresh ``python -m lsp_server`` (``didOpen`` + an inline completion at
the cursor, as ``bench --lsp``) and through a fresh ``fsm-complete serve --http`` (llama.vscode's
``/infill`` body), one after the other, and prints one JSON object: how many texts are the same
(the LSP item's text with the suffix characters its range replaces left out, as ``/infill`` answers
for a plugin that inserts), the ones that differ, and the latency of each path (ms from sending the
request to reading the whole answer; p50, p95, mean).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from .bench_lsp import StdioClient, utf16_position


def _lsp(tasks, model: str | None) -> list[tuple[str, float]]:
    options = {"model": {"path": model}} if model else {}
    client = StdioClient([sys.executable, "-m", "lsp_server"], env=dict(os.environ))
    out = []
    try:
        client.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {},
                                      "initializationOptions": {"fsmComplete": options}})
        client.send("initialized", {}, request=False)
        client.send("textDocument/didOpen", {"textDocument": {"uri": "untitled:w", "languageId": "python",
                                                              "version": 1, "text": "x = "}}, request=False)
        client.request("textDocument/inlineCompletion", {"textDocument": {"uri": "untitled:w"},
                                                         "position": {"line": 0, "character": 4},
                                                         "context": {"triggerKind": 2}})
        for i, task in enumerate(tasks):
            uri, text = f"untitled:t{i}.py", task.prefix + task.suffix
            client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                  "text": text}}, request=False)
            pos = utf16_position(text, len(task.prefix))
            t0 = time.perf_counter()
            msg = client.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "position": pos,
                                                                   "context": {"triggerKind": 2}})
            ms = (time.perf_counter() - t0) * 1e3
            items = (msg.get("result") or {}).get("items") if isinstance(msg.get("result"), dict) else msg.get("result")
            insert = ""
            if items:
                item = items[0]
                insert = item["insertText"] if isinstance(item["insertText"], str) else item["insertText"]["value"]
                end = item.get("range", {}).get("end")
                if end and end != pos and end["line"] == pos["line"]:
                    replaced = task.suffix[: end["character"] - pos["character"]]
                    if insert.endswith(replaced):
                        insert = insert[: len(insert) - len(replaced)]
            out.append((insert, ms))
            client.send("textDocument/didClose", {"textDocument": {"uri": uri}}, request=False)
    finally:
        client.close()
    return out


def _http(tasks, model: str | None) -> list[tuple[str, float]]:
    cmd = [sys.executable, "-m", "fsm_complete.cli", "serve", "--http", "127.0.0.1:0"] + (["--model", model] if model
                                                                                          else [])
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    out = []
    try:
        url = proc.stderr.readline().split("HTTP on ", 1)[1].strip()
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # the log must never fill the pipe

        def infill(prefix: str, suffix: str) -> dict:
            head, _, line = prefix.rpartition("\n")
            body = {"input_prefix": head + ("\n" if "\n" in prefix else ""), "prompt": line, "input_suffix": suffix,
                    "input_extra": [], "n_predict": 128, "top_k": 40, "top_p": 0.99, "stream": False,
                    "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
                    "t_max_predict_ms": 60000}
            req = urllib.request.Request(url + "/infill", json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                return json.loads(r.read())

        infill("x = ", "")  # waits for the model, as the LSP run's first request
        for task in tasks:
            t0 = time.perf_counter()
            answer = infill(task.prefix, task.suffix)
            out.append((answer["content"], (time.perf_counter() - t0) * 1e3))
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def _stats(ms: list[float]) -> dict:
    s = sorted(ms)
    return {"p50": round(statistics.median(s), 1), "p95": round(s[min(len(s) - 1, int(0.95 * len(s)))], 1),
            "mean": round(statistics.fmean(s), 1)}


def main(argv=None) -> int:
    from .corpus import held_out_files
    from .tasks import sample_tasks

    ap = argparse.ArgumentParser(prog="python -m lab.bench_http", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model")
    args = ap.parse_args(argv)
    tasks = sample_tasks(held_out_files(), args.tasks, args.seed)
    lsp, http = _lsp(tasks, args.model), _http(tasks, args.model)
    differ = [{"path": t.path, "lsp": a, "http": b} for t, (a, _), (b, _) in zip(tasks, lsp, http) if a != b]
    report = {"tasks": len(tasks), "same_text": len(tasks) - len(differ), "differ": differ,
              "lsp_ms": _stats([ms for _, ms in lsp]), "http_ms": _stats([ms for _, ms in http])}
    report["http_over_lsp_p50"] = round(report["http_ms"]["p50"] / report["lsp_ms"]["p50"], 3)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
