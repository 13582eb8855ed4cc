#!/usr/bin/env bash
# Quality of pruning (issue 18) on two real trained models: the bundled
# kjv-7m and ../shared's tinystories-3m. Calibration text is never the
# evaluation text:
#   tinystories-3m: calibrate on shared/data/eval/tinystories (lowercased, as
#                   the model was trained), evaluate on its heldout.txt
#   kjv-7m:         calibrate on the first 60 % of models/kjv-7m/heldout.txt,
#                   evaluate on the rest
# For each method x pattern: perplexity (--ctx 128, 40 chunks), KL divergence
# and top-1 agreement against the dense model, file size, and decode /
# prefill speed (infera bench -p 128 -n 64). Then structured pruning
# (FFN 25 % + heads 25 %) before and after distillation
# (tools/train/distill.py, DISTILL_STEPS steps): tinystories-3m on its
# calibration text; kjv-7m on its training corpus (tools/train/corpus.py, the
# Debian package bible-kjv that tools/train/install-train-deps.sh installs;
# without it, the calibration text) with early stopping on the calibration
# text (--val: the student with the lowest KL to the teacher there is kept).
#
# sparsegpt-auto is SparseGPT with --damp auto (the damping chosen per matrix
# on held-out calibration chunks); sparsegpt uses the paper's 1 %.
#
#   bench/prune_quality.sh [DIR=/tmp/pq] [DISTILL_STEPS=400]
#   ONLY=REGEX: only the rows whose label matches (the dense row always runs)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${1:-/tmp/pq}"
STEPS="${2:-400}"
SHARED="$ROOT/../shared"
mkdir -p "$DIR"
OUT="$DIR/results.jsonl"
: > "$OUT"

run_model() {  # name dense calib eval [distill text [distill validation text]]
  local name=$1 dense=$2 calib=$3 eval=$4 d="$DIR/$1" dtext=${5:-$3} dval=${6:-}
  mkdir -p "$d"
  "$INFERA" perplexity -m "$dense" -f "$eval" -c 128 --chunks 40 --kl-divergence-base "$d/base.kld" >/dev/null 2>&1
  measure() {  # label model [extra json]
    local ppl speed
    ppl=$("$INFERA" perplexity -m "$2" -f "$eval" -c 128 --chunks 40 --kl-divergence-base "$d/base.kld" \
          --kl-divergence --json 2>/dev/null)
    speed=$("$INFERA" bench -m "$2" -p 128 -n 64 -r 3 --json 2>/dev/null)
    /usr/bin/python3 - "$name" "$1" "$2" "$ppl" "$speed" "${3:-{\}}" >> "$OUT" <<'PY'
import json, os, sys
name, label, path, ppl, speed, extra = sys.argv[1:]
p, s = json.loads(ppl), {x["test"]: x["tokens_per_second"] for x in json.loads(speed)}
print(json.dumps(dict(model=name, label=label, ppl=p["ppl"], kld=p.get("kld"), top1=p.get("top1_agreement"),
                      mib=os.path.getsize(path) / 2**20, pp=s["pp128"], tg=s["tg64"], **json.loads(extra))))
PY
    echo "$name $1: $(tail -1 "$OUT")" >&2
  }
  want() { [[ -z "${ONLY:-}" || "$1" =~ $ONLY ]]; }
  measure dense "$dense"
  for method in magnitude wanda sparsegpt sparsegpt-auto; do
    for pat in "unstructured --sparsity 0.5" "unstructured --sparsity 0.7" "2:4" "4:8"; do
      local tag
      tag="$method-$(echo "$pat" | tr ' :' '__' | sed 's/--sparsity_//;s/unstructured_/u/')"
      want "$tag" || continue
      local how=(--method "$method")
      [[ $method == sparsegpt-auto ]] && how=(--method sparsegpt --damp auto)
      # shellcheck disable=SC2086  # the pattern's options split into words on purpose
      "$INFERA" --log-level warn prune "$dense" "$d/$tag.gguf" "${how[@]}" --pattern $pat --calib "$calib" \
        --calib-tokens 8192 2>/dev/null
      measure "$tag" "$d/$tag.gguf"
    done
  done
  # 2:4 stored as q8_0_s24 / q4_0_s24 (kernels skip the zeros) against dense
  # Q8_0 / Q4_0 (Q4_0 with llama.cpp's output-tensor rule, as prune applies it).
  if want q8_0; then
    "$INFERA" --log-level warn quantize "$dense" "$d/dense-q8_0.gguf" --type q8_0 --pure 2>/dev/null
    measure dense-q8_0 "$d/dense-q8_0.gguf"
    "$INFERA" --log-level warn prune "$dense" "$d/sparsegpt-2_4-q8_0_s24.gguf" --method sparsegpt --pattern 2:4 \
      --calib "$calib" --calib-tokens 8192 --outtype q8_0 2>/dev/null
    measure sparsegpt-2_4-q8_0_s24 "$d/sparsegpt-2_4-q8_0_s24.gguf"
  fi
  if want q4_0; then
    "$INFERA" --log-level warn quantize "$dense" "$d/dense-q4_0.gguf" --type q4_0 2>/dev/null
    measure dense-q4_0 "$d/dense-q4_0.gguf"
    "$INFERA" --log-level warn prune "$dense" "$d/sparsegpt-2_4-q4_0_s24.gguf" --method sparsegpt --pattern 2:4 \
      --calib "$calib" --calib-tokens 8192 --outtype q4_0 2>/dev/null
    measure sparsegpt-2_4-q4_0_s24 "$d/sparsegpt-2_4-q4_0_s24.gguf"
  fi
  want structured-25 || return 0
  # Structured, then recovered by distillation.
  "$INFERA" --log-level warn prune "$dense" "$d/structured.gguf" --structured both --ratio 0.25 --calib "$calib" \
    --calib-tokens 8192 2>/dev/null
  measure structured-25 "$d/structured.gguf"
  rm -rf "$d/structured-distilled.gguf.work"
  local val=()
  [[ -n $dval ]] && val=(--val "$dval")
  /usr/bin/python3 "$ROOT/tools/train/distill.py" --teacher "$dense" --student "$d/structured.gguf" --text "$dtext" \
    "${val[@]}" --out "$d/structured-distilled.gguf" --steps "$STEPS" --infera "$INFERA" 2>"$d/distill.log"
  measure structured-25-distilled "$d/structured-distilled.gguf" "{\"distill_steps\": $STEPS}"
}

tr '[:upper:]' '[:lower:]' < "$SHARED/data/eval/tinystories/tinystories_197k.txt" > "$DIR/ts-calib.txt"
run_model tinystories-3m "$SHARED/models/tinystories-3m/tinystories-3m-f32.gguf" "$DIR/ts-calib.txt" \
  "$SHARED/models/tinystories-3m/heldout.txt"
KJV="$ROOT/models/kjv-7m"
n=$(wc -c < "$KJV/heldout.txt")
head -c $((n * 6 / 10)) "$KJV/heldout.txt" > "$DIR/kjv-calib.txt"
tail -c +$((n * 6 / 10 + 1)) "$KJV/heldout.txt" > "$DIR/kjv-eval.txt"
kjv_train=("$DIR/kjv-calib.txt")
if command -v bible >/dev/null; then
  /usr/bin/python3 "$ROOT/tools/train/corpus.py" --write-train "$DIR/kjv-train.txt" >/dev/null
  kjv_train=("$DIR/kjv-train.txt" "$DIR/kjv-calib.txt")
else
  echo "prune_quality: no 'bible' program (package bible-kjv): kjv-7m distils on its calibration text" >&2
fi
run_model kjv-7m "$KJV/kjv-7m.gguf" "$DIR/kjv-calib.txt" "$DIR/kjv-eval.txt" "${kjv_train[@]}"

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for model in dict.fromkeys(r["model"] for r in rows):
    rs = [r for r in rows if r["model"] == model]
    dense = rs[0]["ppl"]
    print(f"\n{model}\n")
    print("| model | ppl | ppl increase | KLD vs dense | top-1 agreement | MiB | prefill t/s (pp128) | decode t/s (tg64) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rs:
        kld = "-" if r["kld"] is None else f"{r['kld']:.4f}"
        top1 = "-" if r["top1"] is None else f"{100 * r['top1']:.1f} %"
        print(f"| {r['label']} | {r['ppl']:.4f} | {100 * (r['ppl'] / dense - 1):+.1f} % | {kld} | {top1} | "
              f"{r['mib']:.2f} | {r['pp']:.0f} | {r['tg']:.0f} |")
PY
