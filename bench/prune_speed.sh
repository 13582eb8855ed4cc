#!/usr/bin/env bash
# Speed of pruned models (issue 18), random weights on the standard shapes:
#  - structured: --structured both --ratio 0.25 (25 % of FFN channels and of
#    the heads, as GQA allows) against the dense model, in Q4_0 and Q8_0;
#  - 2:4: magnitude 2:4 in Q8_0 and Q4_0 (stored as q8_0_s24 / q4_0_s24,
#    packed to skip zeros) against dense Q8_0 / Q4_0;
#  - unstructured 50 % / 70 % and 4:8 in Q8_0 (packed by masks at load)
#    against dense Q8_0.
# ONLY (a regex) limits the pairs measured (and the files made), e.g. ONLY='s24|u70'.
# Each pair is benchmarked ROUNDS times, interleaved; prints median tokens/s
# and the ratio per round (pp512 / tg128, THREADS threads).
#
#   bench/prune_speed.sh [DIR=/tmp/pb] [SHAPES="m360 m1b"] [ROUNDS=3] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${1:-/tmp/pb}"
SHAPES="${2:-m360 m1b}"
ROUNDS="${3:-3}"
THREADS="${4:-2}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
CALIB="$ROOT/../shared/data/eval/wikitext-2/wiki.test.raw"
mkdir -p "$DIR"
head -c 200000 "$CALIB" > "$DIR/calib.txt"
# Each pair "dense:pruned" (file names without .gguf); `make_file NAME`
# writes a missing file, only for the pairs that are measured.
PAIRS=()
for s in $SHAPES; do
  for t in q4_0 q8_0; do PAIRS+=("$s-$t:$s-$t-structured"); done
  PAIRS+=("$s-q8_0:$s-q8_0-s24" "$s-q4_0:$s-q4_0-s24")
  for v in u50 u70 48; do PAIRS+=("$s-q8_0:$s-q8_0-$v"); done
done
if [ -n "${ONLY:-}" ]; then
  KEEP=()
  for p in "${PAIRS[@]}"; do [[ "$p" =~ $ONLY ]] && KEEP+=("$p"); done
  PAIRS=("${KEEP[@]}")
fi
make_file() {  # $1 = file name without .gguf
  local f="$1" s="${1%%-*}" rest="${1#*-}"
  [ -f "$DIR/$f.gguf" ] && return
  case "$rest" in
    f16) "$INFERA" --log-level warn convert --random "$s" --vocab "$VOCAB" --outtype f16 "$DIR/$f.gguf" ;;
    q4_0|q8_0) make_file "$s-f16"
      "$INFERA" --log-level warn quantize "$DIR/$s-f16.gguf" "$DIR/$f.gguf" --type "$rest" ;;
    *-structured) make_file "$s-f16"
      "$INFERA" --log-level warn prune "$DIR/$s-f16.gguf" "$DIR/$f.gguf" --structured both --ratio 0.25 \
        --calib "$DIR/calib.txt" --calib-tokens 2048 --outtype "${rest%-structured}" ;;
    *-s24) make_file "$s-${rest%-s24}"  # 2:4 in Q8_0 / Q4_0: stored as q8_0_s24 / q4_0_s24
      "$INFERA" --log-level warn prune "$DIR/$s-${rest%-s24}.gguf" "$DIR/$f.gguf" --method magnitude --pattern 2:4 ;;
    q8_0-u50|q8_0-u70|q8_0-48) make_file "$s-q8_0"
      local opt
      case "${rest#q8_0-}" in u50) opt="--sparsity 0.5" ;; u70) opt="--sparsity 0.7" ;; 48) opt="--pattern 4:8" ;; esac
      # shellcheck disable=SC2086  # the options split into words on purpose
      "$INFERA" --log-level warn prune "$DIR/$s-q8_0.gguf" "$DIR/$f.gguf" --method magnitude $opt ;;
    *) echo "prune_speed.sh: no rule for $f" >&2; exit 2 ;;
  esac
}
for p in "${PAIRS[@]}"; do make_file "${p%%:*}"; make_file "${p##*:}"; done
OUT="$DIR/results.jsonl"
: > "$OUT"
for r in $(seq "$ROUNDS"); do
  for p in "${PAIRS[@]}"; do
    for f in ${p%%:*} ${p##*:}; do
      "$INFERA" bench -m "$DIR/$f.gguf" -p 512 -n 128 -t "$THREADS" -r 2 --json 2>/dev/null |
        /usr/bin/python3 -c "import json,sys; [print(json.dumps(dict(x, pair='$p', file='$f', round=$r))) for x in json.load(sys.stdin)]" >> "$OUT"
    done
  done
done
/usr/bin/python3 - "$OUT" "${PAIRS[@]}" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = {(r["pair"], r["file"], r["test"], r["round"]): r["tokens_per_second"] for r in rows}
rounds = sorted({r["round"] for r in rows})
# The machine is shared: besides medians, the best run of each (the least
# disturbed) and their ratio.
print("| dense | pruned | test | dense t/s median / best | pruned t/s median / best | ratio: median of rounds / best to best | file MiB dense / pruned |")
print("|---|---|---|---|---|---|---|")
d = os.path.dirname(sys.argv[1])
for pair in sys.argv[2:]:
    a, b = pair.split(":")
    for test in ("pp512", "tg128"):
        ta = [t[(pair, a, test, r)] for r in rounds]
        tb = [t[(pair, b, test, r)] for r in rounds]
        ratio = statistics.median(y / x for x, y in zip(ta, tb))
        sa, sb = (os.path.getsize(os.path.join(d, f + ".gguf")) / 2**20 for f in (a, b))
        print(f"| {a} | {b} | {test} | {statistics.median(ta):.1f} / {max(ta):.1f} | {statistics.median(tb):.1f} / {max(tb):.1f} | "
              f"{ratio:.2f}x / {max(tb) / max(ta):.2f}x | {sa:.0f} / {sb:.0f} |")
PY
