#!/usr/bin/env bash
# A Mixtral-shaped model against the dense model with the same active
# parameters (issue 14): writes random-weight `moe-s` (8 experts, top-2,
# expert FFN 1792) and `moe-s-dense` (FFN 3584 = two experts) in F16,
# quantizes both to Q8_0 and Q4_0, then runs `infera bench -p 512 -n 128`
# ROUNDS times, interleaved, recording each run's peak resident memory, and
# prints the medians and the MoE / dense ratios.
#
#   bench/moe_vs_dense.sh [DIR=/tmp/moe] [ROUNDS=3] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${1:-/tmp/moe}"
ROUNDS="${2:-3}"
THREADS="${3:-2}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
SHAPES="moe-s moe-s-dense"
TYPES="q8_0 q4_0"
mkdir -p "$DIR"
for s in $SHAPES; do
  [ -f "$DIR/$s-f16.gguf" ] || "$INFERA" convert --random "$s" --vocab "$VOCAB" --outtype f16 "$DIR/$s-f16.gguf"
  for t in $TYPES; do
    [ -f "$DIR/$s-$t.gguf" ] || "$INFERA" quantize "$DIR/$s-f16.gguf" "$DIR/$s-$t.gguf" --type "$t"
  done
done
OUT="$DIR/results.jsonl"
: > "$OUT"
for r in $(seq "$ROUNDS"); do
  for t in $TYPES; do
    for s in $SHAPES; do
      # A fresh interpreter per run, so RUSAGE_CHILDREN is this run's peak.
      /usr/bin/python3 - "$INFERA" "$DIR/$s-$t.gguf" "$THREADS" "$s" "$t" >> "$OUT" <<'PY'
import json, resource, subprocess, sys
infera, model, threads, shape, typ = sys.argv[1:]
out = subprocess.run([infera, "bench", "-m", model, "-p", "512", "-n", "128", "-t", threads, "-r", "3", "--json"],
                     check=True, capture_output=True, text=True).stdout
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
for x in json.loads(out):
    print(json.dumps(dict(x, shape=shape, file=typ, rss_mib=rss)))
PY
    done
  done
done
/usr/bin/python3 - "$OUT" "$DIR" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(shape, typ, test, key="tokens_per_second"):
    return statistics.median(r[key] for r in rows if r["shape"] == shape and r["file"] == typ and r["test"] == test)
print("| type | model | file MiB | pp512 t/s | tg128 t/s | peak RSS MiB |")
print("|---|---|---|---|---|---|")
for t in ("q8_0", "q4_0"):
    for s in ("moe-s", "moe-s-dense"):
        size = os.path.getsize(os.path.join(sys.argv[2], f"{s}-{t}.gguf")) / 2**20
        print(f"| {t} | {s} | {size:.0f} | {med(s, t, 'pp512'):.1f} | {med(s, t, 'tg128'):.2f} | "
              f"{med(s, t, 'tg128', 'rss_mib'):.0f} |")
for t in ("q8_0", "q4_0"):
    print(f"{t}: MoE / dense decode {med('moe-s', t, 'tg128') / med('moe-s-dense', t, 'tg128'):.2f}, "
          f"prefill {med('moe-s', t, 'pp512') / med('moe-s-dense', t, 'pp512'):.2f}")
PY
