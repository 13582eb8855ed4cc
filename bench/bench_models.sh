#!/usr/bin/env bash
# Speed of infera on the standard benchmark shapes (issue 5): writes random-
# weight models (m360, m1b; llama-2 vocabulary) in F16 and quantizes them to
# Q8_0, Q4_K_M and Q4_0 if missing, then runs `infera bench` ROUNDS times per
# model, interleaving the models so that machine noise spreads evenly, and
# prints the median tokens/s of each test.
#
#   bench/bench_models.sh [DIR=/tmp/bm] [SHAPES="m360 m1b"] [ROUNDS=3] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${1:-/tmp/bm}"
SHAPES="${2:-m360 m1b}"
ROUNDS="${3:-3}"
THREADS="${4:-2}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
TYPES="f16 q8_0 q4_k_m q4_0"
mkdir -p "$DIR"
for s in $SHAPES; do
  [ -f "$DIR/$s-f16.gguf" ] || "$INFERA" convert --random "$s" --vocab "$VOCAB" --outtype f16 "$DIR/$s-f16.gguf"
  for t in $TYPES; do
    [ "$t" = f16 ] || [ -f "$DIR/$s-$t.gguf" ] || "$INFERA" quantize "$DIR/$s-f16.gguf" "$DIR/$s-$t.gguf" --type "$t"
  done
done
OUT="$DIR/results.jsonl"
: > "$OUT"
for r in $(seq "$ROUNDS"); do
  for s in $SHAPES; do
    for t in $TYPES; do
      "$INFERA" bench -m "$DIR/$s-$t.gguf" -p 512 -n 128 -t "$THREADS" -r 3 --json 2>/dev/null |
        /usr/bin/python3 -c "import json,sys; [print(json.dumps(dict(x, shape='$s', file='$t'))) for x in json.load(sys.stdin)]" >> "$OUT"
    done
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["shape"], r["file"], r["test"]) for r in rows}, key=lambda k: (k[0], ["f16", "q8_0", "q4_k_m", "q4_0"].index(k[1]), k[2]))
print("| shape | type | test | median t/s | runs |")
print("|---|---|---|---|---|")
for k in keys:
    v = [r["tokens_per_second"] for r in rows if (r["shape"], r["file"], r["test"]) == k]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {statistics.median(v):.2f} | {' '.join(f'{x:.1f}' for x in v)} |")
PY
