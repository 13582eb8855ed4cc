#!/usr/bin/env bash
# Calibrated quantization vs plain rounding, type by type (issue 20): each
# block type with llama-quantize's round-to-nearest ("rtn"), with an
# importance matrix ("imatrix": llama.cpp's weighted algorithms), and for the
# types GPTQ can write (all of them here) with GPTQ ("gptq", and "gptq-ao" with act-order).
# llama.cpp's default rules apply (the output tensor Q6_K), so the methods
# differ only on the layer matrices. Measured against the F32 model on
# held-out text neither the imatrix nor GPTQ saw: size, bits per weight,
# perplexity, mean KL divergence, top-1 agreement, and an eval accuracy.
#
#   bench/quant_methods.sh kjv   # the bundled model: calibration = the first 40 % of its held-out text,
#                                # scored on the rest; eval: models/kjv-7m/eval/kjv-continuation.jsonl
#   bench/quant_methods.sh ts3m  # tinystories-3m (../shared): calibration = 100 KB of tinystories_197k.txt,
#                                # scored on its heldout.txt; eval: tasks built from heldout.txt
# Env: TYPES (default: all above), DIR (default /tmp/qm), CTX (default 128), CALIB_TOKENS (GPTQ, default 16384), INFERA.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
SHARED="$ROOT/../shared"
WHICH="${1:-kjv}"
DIR="${DIR:-/tmp/qm}/$WHICH"
CTX="${CTX:-128}"
CALIB_TOKENS="${CALIB_TOKENS:-16384}"
TYPES="${TYPES:-iq2_xs q2_k q3_k iq3_s q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k iq4_nl q8_0}"
GPTQ_TYPES=" q2_k q3_k q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k iq4_nl q8_0 "
mkdir -p "$DIR"
case "$WHICH" in
  kjv)
    [ -f "$DIR/f32.gguf" ] || "$INFERA" convert "$ROOT/models/kjv-7m/hf" --outtype f32 "$DIR/f32.gguf" 2>/dev/null
    total=$(wc -c < "$ROOT/models/kjv-7m/heldout.txt")
    head -c $((total * 2 / 5)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/calib.txt"
    tail -c +$((total * 2 / 5 + 1)) "$ROOT/models/kjv-7m/heldout.txt" > "$DIR/eval.txt"
    TASKS="$ROOT/models/kjv-7m/eval/kjv-continuation.jsonl"
    ;;
  ts3m)
    cp "$SHARED/models/tinystories-3m/tinystories-3m-f32.gguf" "$DIR/f32.gguf"
    head -c 100000 "$SHARED/data/eval/tinystories/tinystories_197k.txt" > "$DIR/calib.txt"
    cp "$SHARED/models/tinystories-3m/heldout.txt" "$DIR/eval.txt"
    /usr/bin/python3 "$ROOT/tools/py/make_eval_tasks.py" "$DIR/eval.txt" "$DIR" ts >/dev/null
    TASKS="$DIR/ts-continuation.jsonl"
    ;;
  *) echo "usage: $0 kjv|ts3m" >&2; exit 2 ;;
esac
"$INFERA" imatrix -m "$DIR/f32.gguf" -f "$DIR/calib.txt" --ctx "$CTX" -o "$DIR/imatrix.gguf" 2>&1 | tail -n 1
"$INFERA" perplexity -m "$DIR/f32.gguf" -f "$DIR/eval.txt" --ctx "$CTX" --kl-divergence-base "$DIR/base.bin" --json \
  2>/dev/null > "$DIR/f32.json"
"$INFERA" eval -m "$DIR/f32.gguf" -f "$TASKS" --json 2>/dev/null > "$DIR/f32.eval.json"
run() {  # name, quantize args...
  local name="$1"
  shift
  "$INFERA" quantize "$DIR/f32.gguf" "$DIR/$name.gguf" "$@" 2>/dev/null
  "$INFERA" perplexity -m "$DIR/$name.gguf" -f "$DIR/eval.txt" --ctx "$CTX" --kl-divergence-base "$DIR/base.bin" \
    --kl-divergence --json 2>/dev/null > "$DIR/$name.json"
  "$INFERA" eval -m "$DIR/$name.gguf" -f "$TASKS" --json 2>/dev/null > "$DIR/$name.eval.json"
}
METHODS=()
for t in $TYPES; do
  # iq2_xs is written only with an importance matrix (as llama-quantize writes it).
  [ "$t" = iq2_xs ] || { run "$t-rtn" --type "$t"; METHODS+=("$t-rtn"); }
  [ "$t" = q8_0 ] || { run "$t-imatrix" --type "$t" --imatrix "$DIR/imatrix.gguf"; METHODS+=("$t-imatrix"); }
  if [[ "$GPTQ_TYPES" == *" $t "* ]]; then
    g=(--method gptq --calib "$DIR/calib.txt" --calib-tokens "$CALIB_TOKENS" --calib-ctx "$CTX")
    run "$t-gptq" --type "$t" "${g[@]}"
    run "$t-gptq-ao" --type "$t" "${g[@]}" --act-order
    METHODS+=("$t-gptq" "$t-gptq-ao")
  fi
done
/usr/bin/python3 - "$DIR" "${METHODS[@]}" <<'PY'
import json, os, sys
d, names = sys.argv[1], sys.argv[2:]
load = lambda n: json.load(open(os.path.join(d, n)))
base, bev = load("f32.json"), load("f32.eval.json")
n_w = None
print(f"F32: ppl {base['ppl']:.4f} ± {base['ppl_stderr']:.4f} ({base['tokens']} tokens scored); "
      f"eval acc_norm {100 * bev['acc_norm']:.1f} % ({bev['tasks']} tasks)\n")
print("| type | method | size MiB | ppl | mean KLD | KLD vs RTN | top-1 | eval acc_norm |")
print("|---|---|---|---|---|---|---|---|")
rtn = {}
for n in names:
    t, m = n.split("-", 1)
    r, e = load(n + ".json"), load(n + ".eval.json")
    if m == "rtn":
        rtn[t] = r["kld"]
    vs = f"{r['kld'] / rtn[t]:.2f}×" if t in rtn else "—"
    size = os.path.getsize(os.path.join(d, n + ".gguf")) / 2**20
    print(f"| {t} | {m} | {size:.2f} | {r['ppl']:.4f} | {r['kld']:.5f} | {vs} "
          f"| {100 * r['top1_agreement']:.2f} % | {100 * e['acc_norm']:.1f} % |")
PY
