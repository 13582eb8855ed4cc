#!/usr/bin/env bash
# Byte identity of infera's quantizers with llama.cpp's llama-quantize (issue
# 20): quantizes tinystories-3m's F32 weights (../shared) with both tools,
# every type with --pure (iq2_xs: with the default rules), without and with one importance matrix
# (GGUF; two types also with the legacy .dat file) (made by
# `infera imatrix`, given to both), and compares every tensor's bytes.
# llama.cpp is built by bench/build_llamacpp.sh; nothing of it is committed.
#
#   bench/quant_vs_llamacpp.sh LLAMA_BIN_DIR [DIR=/tmp/qvl] [TYPES=...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
LLAMA="${1:?usage: $0 LLAMA_BIN_DIR [DIR]}"
DIR="${2:-/tmp/qvl}"
TYPES="${3:-q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs iq3_s iq2_xs}"
TS="$ROOT/../shared/models/tinystories-3m"
F32="$TS/tinystories-3m-f32.gguf"
mkdir -p "$DIR"
head -c 100000 "$ROOT/../shared/data/eval/tinystories/tinystories_197k.txt" > "$DIR/calib.txt"
"$INFERA" imatrix -m "$F32" -f "$DIR/calib.txt" --ctx 128 -o "$DIR/im.gguf" 2>&1 | tail -n 1
"$INFERA" imatrix -m "$F32" -f "$DIR/calib.txt" --ctx 128 -o "$DIR/im.dat" 2>&1 | tail -n 1  # the legacy format
PAIRS=()
for t in $TYPES; do
  for w in plain imatrix dat; do
    [ "$t" = iq2_xs ] && [ "$w" = plain ] && continue  # both tools require an imatrix for it
    [ "$t" = q8_0 ] && [ "$w" != plain ] && continue  # no weighted algorithm
    [ "$w" = dat ] && [ "$t" != q4_k ] && [ "$t" != iq3_s ] && continue  # the legacy file: two types suffice
    im=()
    [ "$w" = imatrix ] && im=(--imatrix "$DIR/im.gguf")
    [ "$w" = dat ] && im=(--imatrix "$DIR/im.dat")
    # iq2_xs with the tools' default rules (no imatrix covers token_embd, which they make Q2_K).
    pure=(--pure)
    [ "$t" = iq2_xs ] && pure=()
    "$LLAMA/llama-quantize" "${pure[@]}" "${im[@]}" "$F32" "$DIR/ref-$t-$w.gguf" "$t" > "$DIR/ref-$t-$w.log" 2>&1
    "$INFERA" quantize "$F32" "$DIR/ours-$t-$w.gguf" --type "$t" "${pure[@]}" "${im[@]}" 2> "$DIR/ours-$t-$w.log"
    PAIRS+=("$t-$w")
  done
done
/usr/bin/python3 - "$ROOT" "$DIR" "${PAIRS[@]}" <<'PY'
import os, sys
root, d, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, os.path.join(root, "tests", "reference"))
import quant_reference as qr
print("| type | imatrix | tensors compared | identical | differing blocks |")
print("|---|---|---|---|---|")
for p in pairs:
    t, w = p.rsplit("-", 1)
    ref = qr.read_gguf_tensors(os.path.join(d, f"ref-{p}.gguf"))
    ours = qr.read_gguf_tensors(os.path.join(d, f"ours-{p}.gguf"))
    same, blocks, total = 0, 0, 0
    for name, (typ, ne, raw) in ref.items():
        o = ours.get(name)
        if o is None or (o[0], o[1]) != (typ, ne):
            print(f"  {p}: {name} type/shape differ: {o[:2] if o else None} vs {(typ, ne)}")
            continue
        total += 1
        if o[2] == raw:
            same += 1
            continue
        _, _, ts = qr.TYPES[typ]
        blocks += sum(raw[i:i + ts] != o[2][i:i + ts] for i in range(0, len(raw), ts))
    print(f"| {t} | {dict(plain='no', imatrix='GGUF', dat='legacy .dat')[w]} | {total} | {same} | {blocks} |")
PY
