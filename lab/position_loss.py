"""Held-out loss by token position: does a checkpoint work at every position of its window?

``python -m lab.position_loss [--model DIR] [--window 1024] [--windows 24]`` reads windows of
``--window`` tokens from the default model's held-out files (:func:`lab.corpus.held_out_files`) and
prints the mean next-token loss (nats/token) per 128 positions. A model trained on shorter windows
than its config claims shows the loss rising past its training length (docs/model.md, "The window").
"""

from __future__ import annotations

import argparse
import random


def position_loss(model_dir: str, window: int = 1024, windows: int = 24, bucket: int = 128, seed: int = 0) -> dict[int, float]:
    """Mean loss (nats/token) per ``bucket`` positions (key: the bucket's first position, 0-based)
    over ``windows`` random windows of ``window`` tokens. transformers, float32, one thread."""
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    from engine.text import read_source
    from lab.corpus import held_out_files

    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.config.max_position_embeddings = max(window, model.config.max_position_embeddings)
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    ids: list[int] = []
    for path in held_out_files():
        ids += tok.encode(read_source(path)).ids
        if len(ids) > window * (windows + 16):
            break
    rng = random.Random(seed)
    sums: dict[int, list[float]] = {}
    with torch.no_grad():
        for _ in range(windows):
            s = rng.randrange(0, len(ids) - window - 1)
            x = torch.tensor([ids[s:s + window]])  # [1, window]
            logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)  # [window - 1, vocab]
            nll = -logp.gather(1, x[0, 1:, None])[:, 0]  # [window - 1]
            for b in range(0, window - 1, bucket):
                sums.setdefault(b, []).append(nll[b:b + bucket].mean().item())
    return {b: sum(v) / len(v) for b, v in sorted(sums.items())}


def main() -> None:
    from engine.settings import DEFAULT_MODEL_DIR

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--windows", type=int, default=24)
    args = ap.parse_args()
    for b, loss in position_loss(args.model, args.window, args.windows).items():
        print(f"positions {b:5d}-{b + 127:5d}: loss {loss:.3f}")


if __name__ == "__main__":
    main()
