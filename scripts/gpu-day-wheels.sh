#!/usr/bin/env bash
# The Python packages the accelerator day needs that the device machine's image lacks, as cp312
# manylinux wheels in .whl/ (git-ignored; `run` carries it). The image already has torch 2.11,
# transformers, tokenizers, safetensors, numpy, tqdm, matplotlib, pathspec, pyyaml and pytest
# (/work/.library/device/KINDS.md): carrying another version of one of those would shadow it.
# Not carried: pygls, lsprotocol, cattrs (the LSP server: the day runs no LSP test), ruff (the
# bench's `slots` kind only: the day benches line,args,block), llama-cpp-python (CPU engine).
# Usage: bash scripts/gpu-day-wheels.sh   (prints the total size; run from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# the versions this project is tested with (.venv); one version of each: two stop the install there
WHEELS=(
  "tree-sitter==0.26.1"         # engine/validate.py, engine/fingerprint/facts.py
  "tree-sitter-python==0.25.0"
  "jedi==0.20.1"                # engine/resolve/jedi_client.py
  "parso==0.8.7"                # jedi's parser
  "pyflakes==4.1.0"             # engine/monitors/names_judge.py, the bench's undefined names
  "gguf==0.19.0"                # engine/gguf_checkpoint.py (GGUF files; pure Python)
)
rm -rf .whl.tmp && mkdir -p .whl.tmp
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl.tmp "${WHEELS[@]}"
rm -rf .whl && mv .whl.tmp .whl
ls -l .whl
du -cb .whl/*.whl | awk 'END {printf "wheels: %d files, %.2f MiB\n", NR - 1, $1 / 1048576}'
