#!/usr/bin/env bash
# Speculative decoding (issue 15, item 7): single-stream greedy decode of
# `infera run` with --spec none, --spec ngram (adaptive draft length) and
# --spec ngram --draft-fixed, ROUNDS rounds interleaved; prints the median
# generation rate of each, the speed-ups over none, the acceptance rate and
# the measured cost of an extra token in a step. The three outputs must be
# identical (checked). The default prompt is an input-copying workload: a
# passage, then the instruction to repeat it, then its first words.
# With DRAFT=SMALL.gguf set, two more modes: --draft-model SMALL.gguf
# (drafting while its top probability is >= --draft-p-min, 0.75) and the
# same with --draft-p-min 0 (always drafting up to --draft-max).
#
#   [DRAFT=SMALL.gguf] bench/spec_bench.sh [MODEL=(bundled)] [ROUNDS=3] [N=200] [PROMPT_FILE] [INFERA=build/tools/infera]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:-}"
ROUNDS="${2:-3}"
N="${3:-200}"
PROMPT_FILE="${4:-}"
INFERA="${5:-$ROOT/build/tools/infera}"
MARG=()
[ -n "$MODEL" ] && MARG=(-m "$MODEL")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -z "$PROMPT_FILE" ]; then
  PROMPT_FILE="$TMP/prompt.txt"
  P="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness."
  printf '%s\n\nAgain:\n\n%s' "$P" "In the beginning God created" > "$PROMPT_FILE"
fi
run() {  # mode-name extra-args... ; appends "rate accepted drafted ratio" to $TMP/<mode>
  local name=$1; shift
  "$INFERA" --log-level warn run "${MARG[@]}" -f "$PROMPT_FILE" -n "$N" --temp 0 --ignore-eos "$@" \
    > "$TMP/$name.out" 2> "$TMP/$name.err"
  /usr/bin/python3 - "$TMP/$name.err" >> "$TMP/$name" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rate = re.search(r"generation: \d+ tokens in [\d.]+ ms \(([\d.]+) tok/s\)", t).group(1)
m = re.search(r"(\d+) drafted, (\d+) accepted .* costs ([\d.]+)", t)
print(rate, *(m.groups() if m else ("0", "0", "0")))
PY
}
DRAFT="${DRAFT:-}"
MODES="none ngram fixed"
[ -n "$DRAFT" ] && MODES="$MODES draft draftall"
for r in $(seq "$ROUNDS"); do
  run none --spec none
  run ngram --spec ngram
  run fixed --spec ngram --draft-fixed
  if [ -n "$DRAFT" ]; then
    run draft --draft-model "$DRAFT"
    run draftall --draft-model "$DRAFT" --draft-p-min 0
  fi
  for m in $MODES; do
    cmp -s "$TMP/none.out" "$TMP/$m.out" || { echo "$m output differs" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$TMP" $MODES <<'PY'
import statistics, sys
d, modes = sys.argv[1], sys.argv[2:]
rows = {m: [list(map(float, l.split())) for l in open(f"{d}/{m}")] for m in modes}
base = statistics.median(r[0] for r in rows["none"])
labels = {"none": "--spec none", "ngram": "--spec ngram", "fixed": "ngram --draft-fixed",
          "draft": "--draft-model", "draftall": "draft, --draft-p-min 0"}
print(f"{'mode':<24}{'gen tok/s (median)':>20}{'vs none':>9}{'accepted/drafted':>18}{'extra token cost':>18}")
for m in modes:
    label = labels[m]
    rate = statistics.median(r[0] for r in rows[m])
    dr, ac = rows[m][-1][1], rows[m][-1][2]
    acc = f"{int(ac)}/{int(dr)}" if dr else "-"
    cost = f"{rows[m][-1][3]:.2f}" if dr else "-"
    print(f"{label:<24}{rate:>20.1f}{rate / base:>9.2f}{acc:>18}{cost:>18}")
PY
