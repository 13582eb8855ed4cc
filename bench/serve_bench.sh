#!/usr/bin/env bash
# HTTP serving benchmark (issue 7): starts `infera serve` on MODEL and drives it
# with `infera bench-serve`.
#   1. llama-server's reference workload: 32 non-streaming completions of 63
#      prompt tokens and 64 generated tokens, closed loop, 1 and 8 clients;
#   2. a streaming sweep over 1, 4, 16 and 64 concurrent clients (N prompts
#      each level), with TTFT / TPOT / ITL / end-to-end percentiles, raw JSON
#      and an SVG plot written to OUTDIR.
#   bench/serve_bench.sh MODEL [OUTDIR=bench/results] [N=64] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
MODEL="$1"; OUT="${2:-$ROOT/bench/results}"; N="${3:-64}"; T="${4:-2}"
mkdir -p "$OUT"
LOG="$(mktemp)"
"$INFERA" serve -m "$MODEL" --port 0 -t "$T" --max-queue 1024 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 600); do grep -q "ready:" "$LOG" && break; sleep 0.1; done
PORT="$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$LOG" | head -1)"
URL="http://127.0.0.1:$PORT"
NAME="$(basename "${MODEL%.*}")"
echo "== $NAME: llama-server's workload (32 requests, 63 in / 64 out, non-streaming, closed loop)"
"$INFERA" bench-serve --url "$URL" --no-stream --concurrency 1,8 --num-prompts 32 --input-len 63 --output-len 64 \
  --json "$OUT/$NAME-reference.json"
echo "== $NAME: streaming sweep ($N requests per level, 64 in / 64 out)"
"$INFERA" bench-serve --url "$URL" --concurrency 1,4,16,64 --num-prompts "$N" --input-len 64 --output-len 64 \
  --json "$OUT/$NAME-sweep.json" --plot "$OUT/$NAME-sweep.svg"
kill -TERM $PID
wait $PID && echo "server exited 0"
