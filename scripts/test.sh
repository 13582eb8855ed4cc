#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs dependencies (Debian packages),
#   2. Release build with -Werror, every test through ctest,
#   3. ASan+UBSan build (clang), every test again,
#   4. each file-format fuzzer, built in that same tree, for a bounded time
#      (default 30 s each), from the committed corpus: the seeds and what
#      earlier runs found (tests/fuzz/grown, refreshed by scripts/fuzz_grow.sh),
#      so every run starts above the coverage a 60 s run from the seeds reached.
# Environment: INFERA_FUZZ_SECONDS (default 30), INFERA_SKIP_ASAN=1, INFERA_SKIP_FUZZ=1.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="$(nproc)"
rm -f build/ctest.log build-asan/ctest.log

stage() {  # $1 = the stage starting now, after [minutes:seconds] since the suite started
  printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$1"
}

stage "dependencies"
bash scripts/install-deps.sh
# The official OpenAI client for the server's end-to-end tests (npm registry).
npm ci --prefix tests/e2e/js --no-audit --no-fund --loglevel=error
# Kubernetes / Prometheus Operator models and TypeScript for the manifest
# validation (tests/deploy).
npm ci --prefix tests/deploy/js --no-audit --no-fund --loglevel=error

run_ctest() {  # $1 = build dir, then extra ctest arguments
  local dir="$1"
  shift
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 900 "$@") | tee "$dir/ctest.log"
}

stage "release build (-Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERA_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
stage "release tests"
run_ctest build

if [ "${INFERA_SKIP_ASAN:-0}" != 1 ]; then
  stage "ASan + UBSan build (clang, with the fuzz targets)"
  # One sanitizer tree for the tests and the libFuzzer targets (clang: libFuzzer
  # needs it; its UBSan also checks float-to-int conversions, which GCC's
  # -fsanitize=undefined leaves out). GCC builds the release stage with -Werror.
  # (A tree configured with GCC before is started afresh: when CMake sees the
  # compiler change it resets the cache and drops the options given with it.)
  if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++$' build-asan/CMakeCache.txt; then
    rm -rf build-asan
  fi
  cmake -S . -B build-asan -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFERA_SANITIZE=address,undefined -DINFERA_FUZZ=ON \
    -DINFERA_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$JOBS"
  stage "ASan + UBSan tests"
  # The llama.cpp perplexity sweep (14 files x 40 chunks through the scalar
  # dequantize path) takes ~10 min under ASan; its code is covered there by
  # the bit-exact dequantization test, so the sanitizer stage skips it.
  # The manifest checks run no infera code: once (release stage) is enough.
  # The distillation test spends its time training in torch; the infera
  # commands it calls (prune, perplexity, info) run under the sanitizers in
  # the pruning tests.
  ASAN_OPTIONS=detect_leaks=1 run_ctest build-asan -E '^(py_test_perplexity|py_test_manifests|py_test_distill)$'
fi

if [ "${INFERA_SKIP_FUZZ:-0}" != 1 ]; then
  stage "fuzzing"
  if [ "${INFERA_SKIP_ASAN:-0}" != 1 ]; then
    bash scripts/fuzz.sh "${INFERA_FUZZ_SECONDS:-30}" build-asan
  else
    bash scripts/fuzz.sh "${INFERA_FUZZ_SECONDS:-30}"
  fi
fi

stage "all stages done"
passed=0
for log in build/ctest.log build-asan/ctest.log; do
  [ -f "$log" ] || continue
  n=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
  passed=$((passed + ${n:-0}))
done
echo "all test stages finished"
echo "$passed passed, 0 failed"
