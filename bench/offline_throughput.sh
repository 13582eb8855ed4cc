#!/usr/bin/env bash
# Offline batch throughput of `infera generate` (issue 6): N prompts of about
# IN tokens (lines of the demo model's held-out text), OUT generated tokens
# each (ignore_eos, greedy), with --max-num-seqs N vs 1.
#   bench/offline_throughput.sh MODEL [N=32] [OUT=256] [IN_WORDS=24] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
MODEL="$1"; N="${2:-32}"; OUT="${3:-256}"; WORDS="${4:-24}"; T="${5:-2}"
DIR="$(mktemp -d)"
/usr/bin/python3 - "$ROOT/models/kjv-7m/heldout.txt" "$N" "$OUT" "$WORDS" > "$DIR/in.jsonl" <<'PY'
import json, sys
words = open(sys.argv[1]).read().split()
n, out, w = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    print(json.dumps({"prompt": " ".join(words[i * 50:i * 50 + w]), "max_tokens": out, "temperature": 0,
                      "ignore_eos": True}))
PY
for seqs in "$N" 1; do
  echo "== --max-num-seqs $seqs"
  "$INFERA" generate -m "$MODEL" --input "$DIR/in.jsonl" --output "$DIR/out-$seqs.jsonl" -t "$T" \
    --max-num-seqs "$seqs" 2>&1 | grep "^generate: .*requests in"
done
cmp -s "$DIR/out-$N.jsonl" "$DIR/out-1.jsonl" && echo "outputs identical" || \
  /usr/bin/python3 -c "
import json,sys
a=[json.loads(l)['text'] for l in open('$DIR/out-$N.jsonl')]; b=[json.loads(l)['text'] for l in open('$DIR/out-1.jsonl')]
print('texts identical' if a==b else 'TEXTS DIFFER')"
rm -rf "$DIR"
