#!/usr/bin/env bash
# infera against llama.cpp on the same machine, same files, interleaved
# (issue 5's and issue 15's ratio targets). Writes the random-weight F16
# models with `infera convert` if missing, quantizes them with llama.cpp's
# own llama-quantize (the files the targets are stated on), then runs, per
# round, `infera bench` and `llama-bench` on each file back to back, and
# prints the median tokens/s of each and their ratio.
#
#   LLAMA_BIN=<dir with llama-bench, llama-quantize> \
#   bench/vs_llamacpp.sh [DIR=/tmp/vs] [SHAPES="m360"] [TYPES="f16 q8_0 q4_k_m q4_0"] [ROUNDS=3] [THREADS=2]
# TESTS (default "-p 512 -n 128") is passed to both benches; DEPTH=N adds -d N.
# LLAMA_BIN defaults to the output of bench/build_llamacpp.sh.
# INFERA_ALT="--matmul-dtype bf16" (global infera options) adds, in each round,
# a second infera run with them, and a second table for it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
LLAMA_BIN="${LLAMA_BIN:-$("$ROOT/bench/build_llamacpp.sh")}"
DIR="${1:-/tmp/vs}"
SHAPES="${2:-m360}"
TYPES="${3:-f16 q8_0 q4_k_m q4_0}"
ROUNDS="${4:-3}"
THREADS="${5:-2}"
TESTS="${TESTS:--p 512 -n 128}"
DEPTH="${DEPTH:-0}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
mkdir -p "$DIR"
for s in $SHAPES; do
  [ -f "$DIR/$s-f16.gguf" ] || "$INFERA" convert --random "$s" --vocab "$VOCAB" --outtype f16 "$DIR/$s-f16.gguf"
  for t in $TYPES; do
    [ "$t" = f16 ] || [ -f "$DIR/$s-$t.gguf" ] ||
      "$LLAMA_BIN/llama-quantize" "$DIR/$s-f16.gguf" "$DIR/$s-$t.gguf" "${t^^}" "$THREADS" > /dev/null 2>&1
  done
done
OUT="$DIR/vs_llamacpp.jsonl"
: > "$OUT"
label() {  # engine shape type -> stdin JSON rows -> stdout JSONL {engine, shape, type, test, tps}
  /usr/bin/python3 -c "
import json, sys
for x in json.load(sys.stdin):
    if 'tokens_per_second' in x:
        test, tps = x['test'], x['tokens_per_second']
    else:
        test = f\"pp{x['n_prompt']}\" if x['n_gen'] == 0 else f\"tg{x['n_gen']}\"
        if x.get('n_depth', 0): test += f\"@d{x['n_depth']}\"
        tps = x['avg_ts']
    print(json.dumps(dict(engine='$1', shape='$2', type='$3', test=test, tps=tps)))"
}
for _ in $(seq "$ROUNDS"); do
  for s in $SHAPES; do
    for t in $TYPES; do
      f="$DIR/$s-$t.gguf"
      # shellcheck disable=SC2086
      "$INFERA" bench -m "$f" $TESTS -d "$DEPTH" -t "$THREADS" -r 2 --json 2>/dev/null |
        /usr/bin/python3 -c "import json,sys; d=$DEPTH; r=json.load(sys.stdin); [x.update(test=x['test']+(f'@d{d}' if d else '')) for x in r]; print(json.dumps(r))" |
        label infera "$s" "$t" >> "$OUT"
      if [ -n "${INFERA_ALT:-}" ]; then
        # shellcheck disable=SC2086
        "$INFERA" $INFERA_ALT bench -m "$f" $TESTS -d "$DEPTH" -t "$THREADS" -r 2 --json 2>/dev/null |
          /usr/bin/python3 -c "import json,sys; d=$DEPTH; r=json.load(sys.stdin); [x.update(test=x['test']+(f'@d{d}' if d else '')) for x in r]; print(json.dumps(r))" |
          label infera-alt "$s" "$t" >> "$OUT"
      fi
      # shellcheck disable=SC2086
      "$LLAMA_BIN/llama-bench" -m "$f" $TESTS -d "$DEPTH" -t "$THREADS" -r 2 -o json 2>/dev/null | label llama.cpp "$s" "$t" >> "$OUT"
    done
  done
done
/usr/bin/python3 - "$OUT" "${INFERA_ALT:-}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
alt = sys.argv[2]
keys = list(dict.fromkeys((r["shape"], r["type"], r["test"]) for r in rows))
def runs(engine, k):
    return [r["tps"] for r in rows if r["engine"] == engine and (r["shape"], r["type"], r["test"]) == k]
for engine, title in (("infera", "infera"), ("infera-alt", "infera " + alt)):
    if not any(r["engine"] == engine for r in rows):
        continue
    print(f"| shape | type | test | llama.cpp t/s | {title} t/s | ratio | runs llama.cpp / {title} |")
    print("|---|---|---|---|---|---|---|")
    for k in keys:
        a, b = runs("llama.cpp", k), runs(engine, k)
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        spread = " ".join(f"{x:.1f}" for x in a) + " / " + " ".join(f"{x:.1f}" for x in b)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {ma:.1f} | {mb:.1f} | {mb / ma:.2f} | {spread} |")
    print()
PY
