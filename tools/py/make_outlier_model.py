#!/usr/bin/env python3
"""A model with activation outliers, made from a Llama-layout HF folder by a
function-preserving transform (issue 20): in every layer, a few channels of
the attention and FFN RMSNorm weights are multiplied by FACTOR and the same
input columns of the matrices reading them (q/k/v; gate/up) divided by it.
With a power-of-two factor both products are exact, so the F32 model computes
bit for bit what the original does, while those channels of the normed
activations stand FACTOR times above the rest - as the outlier channels of
large LLMs do (LLM.int8(), SmoothQuant), which tiny models lack.

  /usr/bin/python3 tools/py/make_outlier_model.py IN_HF OUT_HF [--channels 4] [--factor 64] [--seed 0]

Writes OUT_HF/model.safetensors (F32) and copies the other files.
"""
import argparse
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_files  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--channels", type=int, default=4, help="outlier channels per norm (default 4)")
    ap.add_argument("--factor", type=float, default=64, help="a power of two (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.factor <= 0 or math.log2(a.factor) != int(math.log2(a.factor)):
        sys.exit("make_outlier_model: --factor must be a power of two (so the transform is exact)")
    src = os.path.join(a.inp, "model.safetensors")
    if not os.path.isfile(src):
        sys.exit(f"make_outlier_model: {src} not found (a single-file HF checkpoint is needed)")
    if os.path.abspath(a.inp) == os.path.abspath(a.out):
        sys.exit("make_outlier_model: OUT must differ from IN")
    t = model_files.read_safetensors(src)
    rng = np.random.default_rng(a.seed)
    layers = sorted({int(k.split(".")[2]) for k in t if k.startswith("model.layers.")})
    groups = (("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
              ("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj")))
    for l in layers:
        p = f"model.layers.{l}."
        for norm, mats in groups:
            w = t[p + norm + ".weight"]
            ch = rng.choice(w.shape[0], size=min(a.channels, w.shape[0]), replace=False)
            w[ch] *= a.factor
            for m in mats:
                t[p + m + ".weight"][:, ch] /= a.factor
    os.makedirs(a.out, exist_ok=True)
    model_files.write_safetensors(os.path.join(a.out, "model.safetensors"), t, "F32")
    for f in os.listdir(a.inp):
        if f != "model.safetensors" and os.path.isfile(os.path.join(a.inp, f)):
            shutil.copy(os.path.join(a.inp, f), os.path.join(a.out, f))
    print(f"wrote {a.out}: {len(layers)} layers, {a.channels} outlier channels x{a.factor:g} per norm")


if __name__ == "__main__":
    main()
