#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan and runs each for a
# bounded time (default 60 s) from the committed corpus (hand-made seeds and
# the grown corpus of earlier runs, tests/fuzz/grown), as many targets
# at once as there are cores (each target is single-threaded). Exits non-zero
# on any crash, leak, sanitizer report or timeout inside a target.
#   scripts/fuzz.sh [seconds-per-target] [build-dir]
# Without a build dir it configures build-fuzz with the fuzz targets alone.
# With one (the test suite passes build-asan, its clang sanitizer tree
# configured with -DINFERA_FUZZ=ON), it builds the targets there.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
BUILD="${2:-}"
JOBS="$(nproc)"
TARGETS=(gguf safetensors llama2c openai_request kv_block imatrix eval_tasks chat_template)
if [ -z "$BUILD" ]; then
  BUILD=build-fuzz
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFERA_FUZZ=ON -DINFERA_SANITIZE=address,undefined \
    -DINFERA_TESTS=OFF -DINFERA_BENCH=OFF >/dev/null
elif ! grep -q '^INFERA_FUZZ:BOOL=ON$' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz: $BUILD is not a build configured with -DINFERA_FUZZ=ON" >&2
  exit 2
fi
ninja -C "$BUILD" "${TARGETS[@]/%/_fuzzer}"

fuzz_one() {  # $1 = target; its whole output goes to $BUILD/fuzz-$1.log
  local target="$1" work="$BUILD/corpus-$1" grown="$BUILD/grown-$1"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/$target/* "$work/" 2>/dev/null || true
  # The chat-template fuzzer starts from the real templates the tests use.
  if [ "$target" = chat_template ]; then cp -n tests/data/chat_templates/*.jinja "$work/"; fi
  # ... and from the committed grown corpus: earlier runs' inputs, merged to
  # those that add coverage (scripts/fuzz_grow.sh), read but not written to:
  # libFuzzer writes new inputs to the first directory only.
  rm -rf "$grown"
  mkdir -p "$grown"
  if [ -f "tests/fuzz/grown/$target.tar.gz" ]; then tar -xzf "tests/fuzz/grown/$target.tar.gz" -C "$grown"; fi
  "$BUILD/tests/fuzz/${target}_fuzzer" "$work" "$grown" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$BUILD/crash-$target-" \
    >"$BUILD/fuzz-$target.log" 2>&1
}

failed=()
report() {  # $1 = target, $2 = its exit status
  echo "== fuzzed $1 for ${SECONDS_PER_TARGET}s (exit $2)"
  tail -n 12 "$BUILD/fuzz-$1.log"
  if [ "$2" -ne 0 ]; then failed+=("$1"); fi
}

# Runs the targets JOBS at a time; each batch is waited for in order.
for ((i = 0; i < ${#TARGETS[@]}; i += JOBS)); do
  batch=("${TARGETS[@]:i:JOBS}")
  pids=()
  for target in "${batch[@]}"; do
    fuzz_one "$target" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    status=0
    wait "${pids[$k]}" || status=$?
    report "${batch[$k]}" "$status"
  done
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs that fail: $BUILD/crash-*)" >&2
  exit 1
fi
echo "fuzz: all targets ran clean"
