"""Writes the small seed corpus of the fuzzers (committed under corpus/)."""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "py"))
import model_files as mf  # noqa: E402


def main():
    rng = np.random.default_rng(0)
    out = os.path.join(HERE, "corpus")
    for d in ("gguf", "safetensors", "llama2c"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    d, ff, V, H, KV = 8, 16, 12, 2, 1
    hd = d // H
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab", "<0x41>", "<0xE2>", "<0x82>", "<0xAC>"]
    kvs = [("general.architecture", "str", "llama"), ("llama.context_length", "u32", 32),
           ("llama.embedding_length", "u32", d), ("llama.block_count", "u32", 1),
           ("llama.feed_forward_length", "u32", ff), ("llama.attention.head_count", "u32", H),
           ("llama.attention.head_count_kv", "u32", KV), ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
           ("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", ("arr", "str"), tokens),
           ("tokenizer.ggml.scores", ("arr", "f32"), [0.0] * 3 + [-float(i) for i in range(V - 3)]),
           ("tokenizer.ggml.token_type", ("arr", "i32"), [2, 3, 3] + [1] * 5 + [6] * 4),
           ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2)]
    m = lambda o, i: rng.standard_normal((o, i)).astype(np.float32)  # noqa: E731
    T = [("token_embd.weight", m(V, d), mf.GGML_F32), ("output_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
         ("blk.0.attn_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
         ("blk.0.attn_q.weight", m(d, d), mf.GGML_F16), ("blk.0.attn_k.weight", m(KV * hd, d), mf.GGML_F16),
         ("blk.0.attn_v.weight", m(KV * hd, d), mf.GGML_BF16), ("blk.0.attn_output.weight", m(d, d), mf.GGML_F32),
         ("blk.0.ffn_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
         ("blk.0.ffn_gate.weight", m(ff, d), mf.GGML_F32), ("blk.0.ffn_up.weight", m(ff, d), mf.GGML_F32),
         ("blk.0.ffn_down.weight", m(d, ff), mf.GGML_F32)]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_model.gguf"), kvs, T)
    mf.write_gguf(os.path.join(out, "gguf", "vocab_only.gguf"), kvs[8:], [])
    # A sparse MoE layer (qwen2moe: stacked 3-D experts, a shared expert, qkv
    # biases) and Gemma 2's keys, so the fuzzer reaches those paths.
    r2 = np.random.default_rng(1)
    m2 = lambda *shape: r2.standard_normal(shape).astype(np.float32)  # noqa: E731
    moe_kvs = [("general.architecture", "str", "qwen2moe")] + [
        (k.replace("llama.", "qwen2moe."), t, v) for k, t, v in kvs[1:8]] + [
        ("qwen2moe.expert_count", "u32", 2), ("qwen2moe.expert_used_count", "u32", 1),
        ("qwen2moe.expert_feed_forward_length", "u32", 8),
        ("qwen2moe.expert_shared_feed_forward_length", "u32", 8)] + kvs[8:]
    moe_T = [t for t in T if "ffn_gate.w" not in t[0] and "ffn_up.w" not in t[0] and "ffn_down.w" not in t[0]]
    moe_T += [("blk.0.attn_q.bias", m2(d), mf.GGML_F32), ("blk.0.attn_k.bias", m2(KV * hd), mf.GGML_F32),
              ("blk.0.attn_v.bias", m2(KV * hd), mf.GGML_F32), ("blk.0.ffn_gate_inp.weight", m2(2, d), mf.GGML_F32),
              ("blk.0.ffn_gate_exps.weight", m2(2, 8, d), mf.GGML_F16),
              ("blk.0.ffn_up_exps.weight", m2(2, 8, d), mf.GGML_F32),
              ("blk.0.ffn_down_exps.weight", m2(2, d, 8), mf.GGML_F32),
              ("blk.0.ffn_gate_inp_shexp.weight", m2(1, d), mf.GGML_F32),
              ("blk.0.ffn_gate_shexp.weight", m2(8, d), mf.GGML_F32),
              ("blk.0.ffn_up_shexp.weight", m2(8, d), mf.GGML_F32),
              ("blk.0.ffn_down_shexp.weight", m2(d, 8), mf.GGML_F32)]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_moe.gguf"), moe_kvs, moe_T)
    gemma_kvs = [("general.architecture", "str", "gemma2")] + [
        (k.replace("llama.", "gemma2."), t, v) for k, t, v in kvs[1:8]] + [
        ("gemma2.attn_logit_softcapping", "f32", 50.0), ("gemma2.final_logit_softcapping", "f32", 30.0),
        ("gemma2.attention.sliding_window", "u32", 4)] + kvs[8:]
    gemma_T = [t for t in T if t[0] != "blk.0.ffn_norm.weight"] + [
        ("blk.0.ffn_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
        ("blk.0.post_attention_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
        ("blk.0.post_ffw_norm.weight", np.ones(d, np.float32), mf.GGML_F32)]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_gemma2.gguf"), gemma_kvs, gemma_T)
    # Per-layer widths (a pruned model): INT32 arrays for heads, KV heads and
    # FFN width over two layers.
    r3 = np.random.default_rng(2)
    m3 = lambda *shape: r3.standard_normal(shape).astype(np.float32)  # noqa: E731
    pr_kvs = [kv for kv in kvs if kv[0] not in ("llama.block_count", "llama.feed_forward_length",
                                                  "llama.attention.head_count", "llama.attention.head_count_kv")]
    pr_kvs += [("llama.block_count", "u32", 2), ("llama.feed_forward_length", ("arr", "i32"), [ff, 8]),
               ("llama.attention.head_count", ("arr", "i32"), [H, 1]),
               ("llama.attention.head_count_kv", ("arr", "i32"), [KV, 1])]
    pr_T = [t for t in T if not t[0].startswith("blk.")]
    for layer, (h, f_) in enumerate(((H, ff), (1, 8))):
        b = f"blk.{layer}."
        pr_T += [(b + "attn_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
                 (b + "attn_q.weight", m3(h * hd, d), mf.GGML_F32), (b + "attn_k.weight", m3(hd, d), mf.GGML_F32),
                 (b + "attn_v.weight", m3(hd, d), mf.GGML_F32), (b + "attn_output.weight", m3(d, h * hd), mf.GGML_F32),
                 (b + "ffn_norm.weight", np.ones(d, np.float32), mf.GGML_F32),
                 (b + "ffn_gate.weight", m3(f_, d), mf.GGML_F32), (b + "ffn_up.weight", m3(f_, d), mf.GGML_F32),
                 (b + "ffn_down.weight", m3(d, f_), mf.GGML_F32)]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_pruned.gguf"), pr_kvs, pr_T)
    # W8A8 layer matrices (one f16 scale per row) with LLM.int8()-style
    # outlier columns on ffn_down: width 32 (one W8A8 block per row).
    r4 = np.random.default_rng(3)
    m4 = lambda *shape: r4.standard_normal(shape).astype(np.float32)  # noqa: E731
    d4, ff4, hd4 = 32, 32, 16
    w8_kvs = [kv for kv in kvs if kv[0] not in ("llama.embedding_length", "llama.feed_forward_length")]
    w8_kvs += [("llama.embedding_length", "u32", d4), ("llama.feed_forward_length", "u32", ff4)]
    W8 = mf.GGML_W8A8
    w8_T = [("token_embd.weight", m4(V, d4), mf.GGML_F32), ("output_norm.weight", np.ones(d4, np.float32), mf.GGML_F32),
            ("blk.0.attn_norm.weight", np.ones(d4, np.float32), mf.GGML_F32),
            ("blk.0.attn_q.weight", m4(d4, d4), W8), ("blk.0.attn_k.weight", m4(KV * hd4, d4), W8),
            ("blk.0.attn_v.weight", m4(KV * hd4, d4), W8), ("blk.0.attn_output.weight", m4(d4, d4), W8),
            ("blk.0.ffn_norm.weight", np.ones(d4, np.float32), mf.GGML_F32),
            ("blk.0.ffn_gate.weight", m4(ff4, d4), W8), ("blk.0.ffn_up.weight", m4(ff4, d4), W8),
            ("blk.0.ffn_down.weight", m4(d4, ff4), W8),
            ("blk.0.ffn_down.outlier_cols", np.array([3, 17], np.int32), mf.GGML_I32),
            ("blk.0.ffn_down.outlier_weight", m4(d4, 2), mf.GGML_F16)]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_w8a8.gguf"), w8_kvs, w8_T)
    # The same shape with 2:4 sparse Q4_0 layer matrices (infera's q4_0_s24).
    S24 = mf.GGML_Q4_0S24
    s24_T = [(n, a, S24 if t == W8 else t) for n, a, t in w8_T if "outlier" not in n]
    mf.write_gguf(os.path.join(out, "gguf", "tiny_q4_0_s24.gguf"), w8_kvs, s24_T)
    mf.write_safetensors(os.path.join(out, "safetensors", "tiny.safetensors"),
                         {"a": m(2, 3), "b": np.ones(4, np.float32)})
    with open(os.path.join(out, "safetensors", "config.json"), "w") as f:
        json.dump({"model_type": "llama", "vocab_size": 12, "hidden_size": 8, "num_hidden_layers": 1,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}, f)
    # llama2.c v0: dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 12, seq 4.
    n = V * d + d + d * d + 2 * d * hd + d * d + d + 3 * d * ff + d + 2 * 4 * hd // 2
    with open(os.path.join(out, "llama2c", "tiny.bin"), "wb") as f:
        f.write(struct.pack("<7i", d, ff, 1, H, KV, V, 4) + rng.standard_normal(n).astype("<f4").tobytes())
    with open(os.path.join(out, "llama2c", "tok.bin"), "wb") as f:
        f.write(struct.pack("<i", 3))
        for i, t in enumerate(["<unk>", "\n<s>\n", "\n</s>\n", " a", "b"]):
            b = t.encode()
            f.write(struct.pack("<fi", -float(i), len(b)) + b)


if __name__ == "__main__":
    main()
