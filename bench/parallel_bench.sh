#!/usr/bin/env bash
# Split models on this machine (Stage 9): resident weight memory and peak RSS
# per rank, and throughput / communication share of TP 2 and PP 2 (one
# thread per rank, Open MPI over shared memory) against one process with
# two threads, interleaved in rounds; medians.
#
#   bench/parallel_bench.sh MODEL... [-- ROUNDS]     (e.g. /tmp/vs/m1b-q4_0.gguf)
# Env: INFERA (binary), PP (prompt tokens, 128), TG (generated, 32), REPS (3).
set -euo pipefail
INFERA="${INFERA:-$(dirname "$0")/../build/tools/infera}"
ROUNDS=2
models=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then ROUNDS="$2"; break; fi
  models+=("$1")
  shift
done
PP="${PP:-128}" TG="${TG:-32}" REPS="${REPS:-3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out="$(mktemp -d)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; rounds $ROUNDS; pp$PP tg$TG, $REPS reps"

layouts() {  # model -> the layouts it can take
  echo "one"
  "$INFERA" --log-level error bench -m "$1" -p 1 -n 1 -r 1 --tp 2 --parallel-backend threads >/dev/null 2>&1 && echo "tp2"
  echo "pp2"
}

run_one() {  # model layout round
  local m="$1" l="$2" r="$3" tag
  tag="$(basename "$m" .gguf)-$l-$r"
  case "$l" in
    one) /usr/bin/time -f "rss_kb %M" -o "$out/$tag.rank0" "$INFERA" --log-level info bench -m "$m" -p "$PP" -n "$TG" -r "$REPS" -t 2 --json \
           >"$out/$tag.json" 2>"$out/$tag.log" ;;
    tp2|pp2) mpirun --oversubscribe -np 2 --tag-output sh -c '/usr/bin/time -f "rss_kb %M" -o "$0.rank$OMPI_COMM_WORLD_RANK" "$@"' \
           "$out/$tag" "$INFERA" --log-level info bench \
           -m "$m" -p "$PP" -n "$TG" -r "$REPS" -t 1 --json "--${l%2}" 2 >"$out/$tag.json" 2>"$out/$tag.log" ;;
  esac
}

for m in "${models[@]}"; do
  ls=$(layouts "$m")
  for r in $(seq 1 "$ROUNDS"); do
    for l in $ls; do run_one "$m" "$l" "$r"; done
  done
done

/usr/bin/python3 - "$out" "$ROUNDS" "${models[@]}" <<'PY'
import json, os, re, statistics, sys
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(tag):
    txt = open(os.path.join(out, tag + ".json")).read()
    txt = re.sub(r"^\[1,\d+\]<stdout>:", "", txt, flags=re.M)   # --tag-output
    start = txt.index("[")
    return json.loads(txt[start:txt.rindex("]") + 1])
def rss(tag):  # peak RSS of each rank, rank order
    out_ = []
    for r in range(8):
        f = os.path.join(out, f"{tag}.rank{r}")
        if os.path.exists(f):
            out_ += [int(x) / 1024 for x in re.findall(r"rss_kb (\d+)", open(f).read())]
    return out_
def resident(tag):
    log = open(os.path.join(out, tag + ".log")).read()
    return [float(x) for x in re.findall(r"weights resident ([0-9.]+) MiB", log)]
print("| model | layout | pp t/s | tg t/s | tg vs one | comm share pp / tg | KiB per token pp / tg | weights resident per rank MiB | peak RSS per rank MiB |")
print("|---|---|---|---|---|---|---|---|---|")
for m in models:
    name = os.path.basename(m).replace(".gguf", "")
    base_tg = None
    for l in ["one", "tp2", "pp2"]:
        tags = [f"{name}-{l}-{r}" for r in range(1, rounds + 1)]
        if not os.path.exists(os.path.join(out, tags[0] + ".json")):
            continue
        runs = [load(t) for t in tags]
        pp = statistics.median(x[0]["tokens_per_second"] for x in runs)
        tg = statistics.median(x[1]["tokens_per_second"] for x in runs)
        if l == "one":
            base_tg = tg
        share = lambda i: statistics.median(x[i].get("comm_share", 0) for x in runs)
        kib = lambda i: statistics.median(x[i].get("comm_bytes_per_token", 0) for x in runs) / 1024
        comm = f"{100*share(0):.0f} % / {100*share(1):.0f} %" if l != "one" else "—"
        kb = f"{kib(0):.1f} / {kib(1):.1f}" if l != "one" else "—"
        res = " / ".join(f"{v:.0f}" for v in resident(tags[0]))
        peak = " / ".join(f"{v:.0f}" for v in rss(tags[0]))
        print(f"| {name} | {l} | {pp:.1f} | {tg:.2f} | {tg / base_tg:.2f} | {comm} | {kb} | {res} | {peak} |")
PY
