#!/usr/bin/env bash
# Quality of each quantization type on the demo model (issue 5): quantizes the
# F32 weights of models/kjv-7m/hf into every type infera writes, and measures
# perplexity, mean KL divergence and top-1 agreement against the F32 model on
# a text (default: the model's held-out text).
#
#   bench/quant_quality.sh [TEXT=models/kjv-7m/heldout.txt] [CTX=128] [CHUNKS=0 (all)] [DIR=/tmp/qq]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
TEXT="${1:-$ROOT/models/kjv-7m/heldout.txt}"
CTX="${2:-128}"
CHUNKS="${3:-0}"
DIR="${4:-/tmp/qq}"
TYPES="f16 q8_0 q6_k q5_k_m q5_0 q4_k_m q4_k q4_0 iq4_nl q3_k_m iq3_s q2_k"
mkdir -p "$DIR"
CH=()
[ "$CHUNKS" -gt 0 ] && CH=(--chunks "$CHUNKS")
[ -f "$DIR/kjv-f32.gguf" ] || "$INFERA" convert "$ROOT/models/kjv-7m/hf" --outtype f32 "$DIR/kjv-f32.gguf" 2>/dev/null
for t in $TYPES; do
  [ -f "$DIR/kjv-$t.gguf" ] || "$INFERA" quantize "$ROOT/models/kjv-7m/hf" "$DIR/kjv-$t.gguf" --type "$t" 2>/dev/null
done
BASE="$DIR/base-$(basename "$TEXT")-$CTX.bin"
"$INFERA" perplexity -m "$DIR/kjv-f32.gguf" -f "$TEXT" --ctx "$CTX" "${CH[@]}" --kl-divergence-base "$BASE" --json \
  2>/dev/null > "$DIR/f32.json"
for t in $TYPES; do
  "$INFERA" perplexity -m "$DIR/kjv-$t.gguf" -f "$TEXT" --ctx "$CTX" "${CH[@]}" --kl-divergence-base "$BASE" \
    --kl-divergence --json 2>/dev/null > "$DIR/$t.json"
done
/usr/bin/python3 - "$DIR" "$TYPES" <<'PY'
import json, os, sys
d, types = sys.argv[1], sys.argv[2].split()
base = json.load(open(os.path.join(d, "f32.json")))
size = lambda t: os.path.getsize(os.path.join(d, f"kjv-{t}.gguf")) / 2**20
print("| type | size MiB | ppl | Δppl vs F32 | mean KLD | top-1 agreement |")
print("|---|---|---|---|---|---|")
print(f"| f32 | {size('f32'):.2f} | {base['ppl']:.4f} ± {base['ppl_stderr']:.4f} | — | — | — |")
for t in types:
    r = json.load(open(os.path.join(d, f"{t}.json")))
    dp = 100 * (r["ppl"] / base["ppl"] - 1)
    print(f"| {t} | {size(t):.2f} | {r['ppl']:.4f} | {dp:+.2f} % | {r['kld']:.5f} | {100 * r['top1_agreement']:.2f} % |")
PY
