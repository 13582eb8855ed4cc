#!/usr/bin/env bash
# What an importance matrix buys, type by type (issue 20): quantizes an F32
# model into each block type with plain rounding (llama-quantize without
# --imatrix) and with `infera quantize --imatrix` (its importance-weighted
# algorithms), every tensor in the type (--pure), and measures perplexity,
# mean KL divergence and top-1 agreement against the F32 model on held-out
# text the imatrix never saw.
#
#   bench/imatrix_quality.sh kjv   # the bundled model: imatrix from the first 40 % of its held-out text,
#                                  # scored on the rest
#   bench/imatrix_quality.sh ts3m  # tinystories-3m (../shared): imatrix from tinystories_197k.txt (100 KB),
#                                  # scored on its heldout.txt
# Env: DIR (default /tmp/imq), CTX (default 128), INFERA.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
SHARED="$ROOT/../shared"
WHICH="${1:-kjv}"
DIR="${DIR:-/tmp/imq}/$WHICH"
CTX="${CTX:-128}"
TYPES="q2_k q3_k q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k iq4_nl"
mkdir -p "$DIR"
case "$WHICH" in
  kjv)
    [ -f "$DIR/f32.gguf" ] || "$INFERA" convert "$ROOT/models/kjv-7m/hf" --outtype f32 "$DIR/f32.gguf" 2>/dev/null
    total=$(wc -c < "$ROOT/models/kjv-7m/heldout.txt")
    head -c $((total * 2 / 5)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/calib.txt"
    tail -c +$((total * 2 / 5 + 1)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/eval.txt"
    ;;
  ts3m)
    cp "$SHARED/models/tinystories-3m/tinystories-3m-f32.gguf" "$DIR/f32.gguf"
    head -c 100000 "$SHARED/data/eval/tinystories/tinystories_197k.txt" > "$DIR/calib.txt"
    cp "$SHARED/models/tinystories-3m/heldout.txt" "$DIR/eval.txt"
    ;;
  *) echo "usage: $0 kjv|ts3m" >&2; exit 2 ;;
esac
"$INFERA" imatrix -m "$DIR/f32.gguf" -f "$DIR/calib.txt" --ctx "$CTX" -o "$DIR/imatrix.gguf" 2>&1 | tail -n 1
"$INFERA" perplexity -m "$DIR/f32.gguf" -f "$DIR/eval.txt" --ctx "$CTX" --kl-divergence-base "$DIR/base.bin" --json \
  2>/dev/null > "$DIR/f32.json"
for t in $TYPES; do
  for mode in rtn imatrix; do
    extra=()
    [ "$mode" = imatrix ] && extra=(--imatrix "$DIR/imatrix.gguf")
    "$INFERA" quantize "$DIR/f32.gguf" "$DIR/$t-$mode.gguf" --type "$t" --pure "${extra[@]}" 2>/dev/null
    "$INFERA" perplexity -m "$DIR/$t-$mode.gguf" -f "$DIR/eval.txt" --ctx "$CTX" --kl-divergence-base "$DIR/base.bin" \
      --kl-divergence --json 2>/dev/null > "$DIR/$t-$mode.json"
  done
done
/usr/bin/python3 - "$DIR" "$TYPES" <<'PY'
import json, os, sys
d, types = sys.argv[1], sys.argv[2].split()
base = json.load(open(os.path.join(d, "f32.json")))
print(f"F32: ppl {base['ppl']:.4f} ± {base['ppl_stderr']:.4f} ({base['tokens']} tokens scored)\n")
print("| type | size MiB | ppl RTN | ppl imatrix | KLD RTN | KLD imatrix | KLD change | top-1 RTN | top-1 imatrix |")
print("|---|---|---|---|---|---|---|---|---|")
for t in types:
    r, i = (json.load(open(os.path.join(d, f"{t}-{m}.json"))) for m in ("rtn", "imatrix"))
    size = os.path.getsize(os.path.join(d, f"{t}-imatrix.gguf")) / 2**20
    ch = 100 * (i["kld"] / r["kld"] - 1)
    print(f"| {t} | {size:.2f} | {r['ppl']:.4f} | {i['ppl']:.4f} | {r['kld']:.5f} | {i['kld']:.5f} | {ch:+.1f} % "
          f"| {100 * r['top1_agreement']:.2f} % | {100 * i['top1_agreement']:.2f} % |")
PY
