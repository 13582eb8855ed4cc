#!/usr/bin/env bash
# Folds what fuzzing found into the committed grown corpus, so that the next
# run (scripts/fuzz.sh, the test suite's fuzz stage) starts where this one
# stopped instead of from the hand-made seeds:
#   scripts/fuzz.sh 600 build-asan     # fuzz for a while (inputs in build-asan/corpus-*)
#   scripts/fuzz_grow.sh build-asan    # rewrite tests/fuzz/grown/<target>.tar.gz
# For each target the committed grown corpus is kept whole, and libFuzzer's
# -merge=1 adds, from the seeds and the run's corpus, the fewest inputs that
# cover what it does not (smallest first). The archives are deterministic
# (sorted names, no times or owners): an update that adds nothing changes no
# bytes.
#   scripts/fuzz_grow.sh build-dir [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:?usage: scripts/fuzz_grow.sh build-dir [target...]}"
shift
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then  # every fuzz target built there (scripts/fuzz.sh's list)
  for fuzzer in "$BUILD"/tests/fuzz/*_fuzzer; do
    if [ -x "$fuzzer" ]; then
      name="${fuzzer##*/}"
      TARGETS+=("${name%_fuzzer}")
    fi
  done
  if [ ${#TARGETS[@]} -eq 0 ]; then
    echo "fuzz_grow: no fuzz targets in $BUILD/tests/fuzz (scripts/fuzz.sh builds them)" >&2
    exit 2
  fi
fi
mkdir -p tests/fuzz/grown
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for target in "${TARGETS[@]}"; do
  fuzzer="$BUILD/tests/fuzz/${target}_fuzzer"
  if [ ! -x "$fuzzer" ]; then
    echo "fuzz_grow: $fuzzer is not built (scripts/fuzz.sh builds it)" >&2
    exit 2
  fi
  archive="tests/fuzz/grown/$target.tar.gz"
  new="$tmp/new-$target"
  mkdir -p "$new"
  if [ -f "$archive" ]; then tar -xzf "$archive" -C "$new"; fi
  inputs=()
  for dir in "tests/fuzz/corpus/$target" "$BUILD/corpus-$target"; do
    if [ -d "$dir" ]; then inputs+=("$dir"); fi
  done
  if [ "$target" = chat_template ]; then inputs+=(tests/data/chat_templates); fi
  "$fuzzer" -merge=1 -max_len=65536 -rss_limit_mb=2048 -timeout=10 "$new" "${inputs[@]}" \
    >"$tmp/merge-$target.log" 2>&1 || {
    tail -n 20 "$tmp/merge-$target.log" >&2
    echo "fuzz_grow: merging $target failed" >&2
    exit 1
  }
  (cd "$new" && find . -type f -printf '%P\n' | LC_ALL=C sort) >"$tmp/list-$target"
  tar --create --no-recursion --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=u=rw,go=r \
    -C "$new" -T "$tmp/list-$target" | gzip -9n >"$tmp/$target.tar.gz"
  mv "$tmp/$target.tar.gz" "$archive"
  echo "fuzz_grow: $target: $(wc -l <"$tmp/list-$target") inputs, $(du -k "$archive" | cut -f1) KiB;" \
    "$(grep -o '[0-9]* new files with [0-9]* new features' "$tmp/merge-$target.log" | tail -n 1) added"
done
