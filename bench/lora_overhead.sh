#!/usr/bin/env bash
# What a LoRA adapter costs at run time (docs/performance.md): prompt and
# decode speed of `infera run` on a random model with and without a random
# adapter on every target matrix (q, k, v, o, gate, up, down), rounds
# interleaved, medians printed.
# Usage: bench/lora_overhead.sh [DIR] [SHAPE] [TYPE] [RANK] [ROUNDS]
#   DIR: where the model files go (default /tmp/lora-bench); SHAPE: a
#   `convert --random` shape (m360); TYPE: a quantize type (q4_0); RANK (16).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INFERA="${INFERA:-$ROOT/build/tools/infera}"
DIR="${1:-/tmp/lora-bench}"
SHAPE="${2:-m360}"
TYPE="${3:-q4_0}"
RANK="${4:-16}"
ROUNDS="${5:-5}"
VOCAB="$ROOT/../shared/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf"
mkdir -p "$DIR"
F16="$DIR/$SHAPE-f16.gguf"
MODEL="$DIR/$SHAPE-$TYPE.gguf"
ADAPTER="$DIR/$SHAPE-lora-r$RANK.gguf"
[ -f "$F16" ] || "$INFERA" convert --random "$SHAPE" --vocab "$VOCAB" --outtype f16 "$F16"
[ -f "$MODEL" ] || "$INFERA" quantize "$F16" "$MODEL" --type "$TYPE"
if [ ! -f "$ADAPTER" ]; then
  ROOT="$ROOT" /usr/bin/python3 - "$F16" "$ADAPTER" "$RANK" <<'EOF'
import os
import sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tools", "py"))
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tools", "train"))
import gguf_model, model_files as mf
src, dst, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
meta, tensors = gguf_model.read_gguf(src)
arch = meta["general.architecture"]
rng = np.random.default_rng(0)
T = []
for l in range(meta[arch + ".block_count"]):
    for t in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        n_out, n_in = tensors[f"blk.{l}.{t}.weight"][1]
        T += [(f"blk.{l}.{t}.weight.lora_a", (rng.standard_normal((rank, n_in)) * 0.01).astype(np.float32), mf.GGML_F16),
              (f"blk.{l}.{t}.weight.lora_b", (rng.standard_normal((n_out, rank)) * 0.01).astype(np.float32), mf.GGML_F16)]
mf.write_gguf(dst, [("general.architecture", "str", arch), ("general.type", "str", "adapter"),
                    ("adapter.type", "str", "lora"), ("adapter.lora.alpha", "f32", float(rank))], T)
EOF
fi
speeds() {  # prints "prompt_tps gen_tps"
  "$INFERA" --log-level warn run -m "$MODEL" -p "$(printf 'word %.0s' $(seq 1 100))" -n 128 --temp 0 --ignore-eos \
    --no-display-prompt "$@" 2>&1 >/dev/null | sed -n 's/.*prompt: .*(\([0-9.]*\) tok\/s).*generation: .*(\([0-9.]*\) tok\/s).*/\1 \2/p'
}
: >"$DIR/plain.txt"
: >"$DIR/lora.txt"
for r in $(seq 1 "$ROUNDS"); do
  speeds >>"$DIR/plain.txt"
  speeds --lora "$ADAPTER" >>"$DIR/lora.txt"
done
/usr/bin/python3 - "$DIR/plain.txt" "$DIR/lora.txt" "$SHAPE $TYPE rank $RANK" <<'EOF'
import sys, statistics as st
rows = [[tuple(map(float, l.split())) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
(pp0, tg0), (pp1, tg1) = [(st.median(r[0] for r in x), st.median(r[1] for r in x)) for x in rows]
print(f"{sys.argv[3]}: prompt {pp0:.1f} -> {pp1:.1f} t/s ({pp1 / pp0:.3f}x), "
      f"decode {tg0:.1f} -> {tg1:.1f} t/s ({tg1 / tg0:.3f}x), medians of {len(rows[0])} rounds")
EOF
