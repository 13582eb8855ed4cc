#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan and runs each for a
# bounded time (default 60 s) from the committed seed corpus. Exits non-zero
# on any crash, leak, sanitizer report or timeout inside a target.
#   scripts/fuzz.sh [seconds-per-target]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
BUILD=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFERA_FUZZ=ON -DINFERA_SANITIZE=address,undefined -DINFERA_TESTS=OFF -DINFERA_BENCH=OFF >/dev/null
ninja -C "$BUILD" gguf_fuzzer safetensors_fuzzer llama2c_fuzzer openai_request_fuzzer kv_block_fuzzer imatrix_fuzzer eval_tasks_fuzzer \
  chat_template_fuzzer
for target in gguf safetensors llama2c openai_request kv_block imatrix eval_tasks chat_template; do
  work="$BUILD/corpus-$target"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/$target/* "$work/" 2>/dev/null || true
  # The chat-template fuzzer starts from the real templates the tests use.
  if [ "$target" = chat_template ]; then cp -n tests/data/chat_templates/*.jinja "$work/"; fi
  echo "== fuzzing $target for ${SECONDS_PER_TARGET}s"
  "$BUILD/tests/fuzz/${target}_fuzzer" "$work" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$BUILD/crash-$target-" 2>&1 | tail -n 12
done
echo "fuzz: all targets ran clean"
