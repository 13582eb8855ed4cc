#!/usr/bin/env bash
# Decode speed when a core is shared (issue 15, item 6): `infera bench -n 64`
# unloaded, then with a competing CPU-bound process pinned to the last CPU
# this process may use (same priority), with the default thread count and
# with -t 1; ROUNDS rounds, interleaved; prints medians and the ratios
# loaded / unloaded and default / -t 1 under load.
#
#   bench/contention.sh [MODEL=(bundled)] [ROUNDS=3] [INFERA=build/tools/infera]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:-}"
ROUNDS="${2:-3}"
INFERA="${3:-$ROOT/build/tools/infera}"
MARG=()
[ -n "$MODEL" ] && MARG=(-m "$MODEL")
LAST_CPU=$(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' | tail -1 | sed 's/.*-//')
tg() {  # prints tg t/s
  "$INFERA" --log-level warn bench "${MARG[@]}" -p 0 -n 64 -r 3 --json "$@" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["tokens_per_second"])'
}
busy_start() { taskset -c "$LAST_CPU" sh -c 'while :; do :; done' & BUSY=$!; sleep 0.5; }
busy_stop() { kill "$BUSY"; wait "$BUSY" 2>/dev/null || true; }
trap 'kill ${BUSY:-0} 2>/dev/null || true' EXIT
declare -a U L1 LD
for r in $(seq "$ROUNDS"); do
  U+=("$(tg)")
  busy_start
  LD+=("$(tg)")
  L1+=("$(tg -t 1)")
  busy_stop
done
/usr/bin/python3 - "${U[*]}" "${LD[*]}" "${L1[*]}" <<'PY'
import statistics, sys
u, ld, l1 = (statistics.median(map(float, a.split())) for a in sys.argv[1:4])
print(f"tg64 unloaded (default threads): {u:.1f} t/s")
print(f"tg64 one core busy, default threads: {ld:.1f} t/s ({ld / u:.2f}x unloaded)")
print(f"tg64 one core busy, -t 1: {l1:.1f} t/s (default / -t 1 = {ld / l1:.2f})")
PY
