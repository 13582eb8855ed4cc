#!/usr/bin/env bash
# W8A8 and SmoothQuant (issue 20).
#
#   bench/w8a8.sh quality   # kjv-7m and its outlier model (tools/py/make_outlier_model.py): ppl, KLD and
#                           # top-1 vs F32 for Q8_0, W8A8, W8A8 + SmoothQuant (alpha 0.5), W8A8 + outlier
#                           # columns (LLM.int8()-style, --outlier-threshold 20)
#   bench/w8a8.sh speed     # m360 / m1b random-weight models: pp512 and tg128 of Q8_0 vs W8A8, ROUNDS
#                           # interleaved rounds, medians and their ratio
# Env: DIR (default /tmp/w8a8), ROUNDS (default 5), THREADS (default 2), SHAPES (default "m360 m1b"), INFERA.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${DIR:-/tmp/w8a8}"
ROUNDS="${ROUNDS:-5}"
THREADS="${THREADS:-2}"
SHAPES="${SHAPES:-m360 m1b}"
mkdir -p "$DIR"
case "${1:-quality}" in
  quality)
    total=$(wc -c < "$ROOT/models/kjv-7m/heldout.txt")
    head -c $((total * 2 / 5)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/calib.txt"
    tail -c +$((total * 2 / 5 + 1)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/eval.txt"
    [ -d "$DIR/outlier_hf" ] || /usr/bin/python3 "$ROOT/tools/py/make_outlier_model.py" "$ROOT/models/kjv-7m/hf" "$DIR/outlier_hf"
    echo "| model | type | ppl | mean KLD | top-1 |"
    echo "|---|---|---|---|---|"
    for model in kjv outlier; do
      src="$ROOT/models/kjv-7m/hf"; [ "$model" = outlier ] && src="$DIR/outlier_hf"
      "$INFERA" --log-level warn convert "$src" --outtype f32 "$DIR/$model-f32.gguf"
      "$INFERA" --log-level warn quantize "$DIR/$model-f32.gguf" "$DIR/$model-q8_0.gguf" --type q8_0 2>/dev/null
      "$INFERA" --log-level warn quantize "$DIR/$model-f32.gguf" "$DIR/$model-w8a8.gguf" --type w8a8 2>/dev/null
      "$INFERA" --log-level warn quantize "$DIR/$model-f32.gguf" "$DIR/$model-w8a8-smooth.gguf" --type w8a8 \
        --smooth-alpha 0.5 --calib "$DIR/calib.txt" 2>&1 | grep smoothquant >&2
      "$INFERA" --log-level warn quantize "$DIR/$model-f32.gguf" "$DIR/$model-w8a8-outliers.gguf" --type w8a8 \
        --outlier-threshold 20 --calib "$DIR/calib.txt" 2>&1 | grep outliers >&2
      base="$DIR/$model-f32.kld"
      ppl=$("$INFERA" --log-level warn perplexity -m "$DIR/$model-f32.gguf" -f "$DIR/eval.txt" -c 128 \
              --kl-divergence-base "$base" 2>&1 | tr '\r' '\n' | sed -n 's/^ppl = \([0-9.]*\).*/\1/p')
      echo "| $model | f32 | $ppl | 0 | 100 % |"
      for t in q8_0 w8a8 w8a8-smooth w8a8-outliers; do
        out=$("$INFERA" --log-level warn perplexity -m "$DIR/$model-$t.gguf" -f "$DIR/eval.txt" -c 128 \
                --kl-divergence-base "$base" --kl-divergence 2>&1 | tr '\r' '\n')
        ppl=$(sed -n 's/^ppl = \([0-9.]*\).*/\1/p' <<< "$out")
        kld=$(sed -n 's/^KL divergence = \([0-9.]*\).*/\1/p' <<< "$out")
        top=$(sed -n 's/.*top-1 agreement = \([0-9.]*\) %.*/\1/p' <<< "$out")
        echo "| $model | $t | $ppl | $kld | $top % |"
      done
    done
    ;;
  speed)
    VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
    for s in $SHAPES; do
      [ -f "$DIR/$s-f16.gguf" ] || "$INFERA" convert --random "$s" --vocab "$VOCAB" --outtype f16 "$DIR/$s-f16.gguf"
      for t in q8_0 w8a8; do
        [ -f "$DIR/$s-$t.gguf" ] || "$INFERA" quantize "$DIR/$s-f16.gguf" "$DIR/$s-$t.gguf" --type "$t" 2>/dev/null
      done
    done
    OUT="$DIR/speed.jsonl"
    : > "$OUT"
    for r in $(seq "$ROUNDS"); do
      for s in $SHAPES; do
        for t in q8_0 w8a8; do
          "$INFERA" bench -m "$DIR/$s-$t.gguf" -p 512 -n 128 -t "$THREADS" -r 1 --json 2>/dev/null |
            /usr/bin/python3 -c "import json,sys; [print(json.dumps(dict(x, shape='$s', file='$t'))) for x in json.load(sys.stdin)]" >> "$OUT"
        done
      done
    done
    /usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| shape | test | Q8_0 t/s (median) | W8A8 t/s (median) | W8A8 / Q8_0 | runs Q8_0 | runs W8A8 |")
print("|---|---|---|---|---|---|---|")
for s in dict.fromkeys(r["shape"] for r in rows):
    for test in dict.fromkeys(r["test"] for r in rows if r["shape"] == s):
        v = {t: [r["tokens_per_second"] for r in rows if (r["shape"], r["test"], r["file"]) == (s, test, t)] for t in ("q8_0", "w8a8")}
        a, b = statistics.median(v["q8_0"]), statistics.median(v["w8a8"])
        print(f"| {s} | {test} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {' '.join(f'{x:.0f}' for x in v['q8_0'])} | {' '.join(f'{x:.0f}' for x in v['w8a8'])} |")
PY
    ;;
  *) echo "usage: bench/w8a8.sh quality|speed" >&2; exit 2 ;;
esac
