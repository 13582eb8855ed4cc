#!/usr/bin/env bash
# Builds llama.cpp natively (CPU only, -march=native) for the comparison
# benchmarks, with no internet beyond the npm registry: the npm package
# node-llama-cpp ships llama.cpp's source as a git bundle
# (llama/gitRelease.bundle; 3.22.1 holds llama.cpp de3ff81, release v0.5.0,
# 2026-09-28). Only llama-bench, llama-quantize and llama-batched-bench are
# built. Benchmark tooling only: nothing of infera's build or tests uses it.
#
#   bench/build_llamacpp.sh [DIR=/tmp/llamacpp] [NODE_LLAMA_CPP_VERSION=3.22.1]
# Prints the directory holding the binaries (DIR/src/build/bin).
set -euo pipefail
DIR="${1:-/tmp/llamacpp}"
VERSION="${2:-3.22.1}"
mkdir -p "$DIR"
cd "$DIR"
if [ ! -d src/.git ]; then
  [ -f "node-llama-cpp-$VERSION.tgz" ] || npm pack --silent "node-llama-cpp@$VERSION" >&2
  tar xzf "node-llama-cpp-$VERSION.tgz" package/llama/gitRelease.bundle
  git clone --quiet package/llama/gitRelease.bundle src
fi
cmake -S src -B src/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build src/build -j"$(nproc)" --target llama-bench llama-quantize llama-batched-bench >&2
echo "$DIR/src/build/bin"
