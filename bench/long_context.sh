#!/usr/bin/env bash
# Long prompts and long contexts (issue 15's targets): prefill at 512 and
# 4,096 tokens with f32 and bf16 K/V, decode at depth 0 and 4,096 with f32,
# int8 and bf16 K/V (--kv-cache-type), on one
# model (default: m360 Q4_0, written if missing), ROUNDS interleaved rounds;
# prints the median tokens/s of each test and the two ratios the targets
# are stated in (pp4096 / pp512 >= 0.6, tg @ d4096 / tg @ d0 >= 0.7).
#
#   bench/long_context.sh [MODEL=/tmp/bm/m360-q4_0.gguf] [ROUNDS=3] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
MODEL="${1:-/tmp/bm/m360-q4_0.gguf}"
ROUNDS="${2:-3}"
THREADS="${3:-2}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  F16="${MODEL%.gguf}-f16-src.gguf"
  "$INFERA" convert --random m360 --vocab "$VOCAB" --outtype f16 "$F16"
  "$INFERA" quantize "$F16" "$MODEL" --type q4_0
fi
OUT="$(mktemp)"
run() {  # label, bench arguments...
  local label="$1"; shift
  "$INFERA" bench -m "$MODEL" -t "$THREADS" --json "$@" 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; [print(json.dumps(dict(x, label='$label'))) for x in json.load(sys.stdin)]" >> "$OUT"
}
for _ in $(seq "$ROUNDS"); do
  for kv in f32 bf16; do
    run "pp512 $kv" -p 512 -n 0 -r 1 --kv-cache-type "$kv"
    run "pp4096 $kv" -p 4096 -n 0 -r 1 --kv-cache-type "$kv"
  done
  for kv in f32 q8 bf16; do
    run "tg64 $kv" -p 0 -n 64 -r 2 --kv-cache-type "$kv"
    run "tg64@d4096 $kv" -p 0 -n 64 -d 4096 -r 2 --kv-cache-type "$kv"
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for label in dict.fromkeys(r["label"] for r in rows):
    med[label] = statistics.median(r["tokens_per_second"] for r in rows if r["label"] == label)
print("| test | median t/s |")
print("|---|---|")
for k, v in med.items():
    print(f"| {k} | {v:.1f} |")
print()
for kv in ("f32", "bf16"):
    print(f"pp4096 / pp512, {kv} K/V = {med[f'pp4096 {kv}'] / med[f'pp512 {kv}']:.2f} (target >= 0.6)")
for kv in ("f32", "q8", "bf16"):
    print(f"tg @ d4096 / tg @ d0, {kv} K/V = {med[f'tg64@d4096 {kv}'] / med[f'tg64 {kv}']:.2f} (target >= 0.7)")
PY
rm -f "$OUT"
