#!/usr/bin/env bash
# Build (once per CPU) and install llama-cpp-python, the llama.cpp engine's binding (issue 32).
#
#   bash scripts/llama-cpp-wheel.sh            # into the active Python (or $PYTHON)
#
# No wheel is published for this platform, so pip builds llama.cpp from source: about 10 minutes on
# two cores. The wheel is kept in ~/.cache/fsm-complete/llama-cpp/<version>-<cpu key>/ and reused: the
# key hashes the CPU's instruction-set flags, because a build tuned for this CPU (GGML_NATIVE, the
# default, which is what makes llama.cpp fast: AVX-512/VNNI/BF16 kernels where the CPU has them) dies
# with SIGILL on a CPU without those instructions. The build is Release, no CUDA, no examples or tests.
set -euo pipefail
PY="${PYTHON:-python}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|sse4|amx|bmi)' | sort | tr '\n' ' ')
key=$(printf '%s' "$flags" | sha256sum | cut -c1-12)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/fsm-complete/llama-cpp/$VERSION-$key"
if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "llama-cpp-python $VERSION: building for this CPU (key $key; about 10 minutes on 2 cores)" >&2
  mkdir -p "$dir.tmp"
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF" \
    "$PY" -m pip wheel --no-deps --no-cache-dir -w "$dir.tmp" "llama-cpp-python==$VERSION"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
"$PY" -m pip install -q "$dir"/llama_cpp_python-*.whl
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, llama_cpp.llama_print_system_info().decode().strip())"
