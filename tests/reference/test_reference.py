"""infera's logits vs the numpy reference, for small random models of every
supported variant, loaded from both GGUF and Hugging Face safetensors."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "py"))
import model_files as mf  # noqa: E402
import reference as ref  # noqa: E402

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")

VARIANTS = {
    # name: (arch, overrides)
    "llama_gqa": ("llama", dict(num_attention_heads=4, num_key_value_heads=2)),
    "llama_mqa_tied": ("llama", dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True)),
    "llama3_rope_scaling": ("llama", dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                                          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                            high_freq_factor=4.0,
                                                            original_max_position_embeddings=64))),
    "qwen2_bias_tied": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                      rope_theta=1000000.0)),
    "mistral_sliding_window": ("mistral", dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=8)),
    # head_dim 32 with 4 heads: q_dim 128 != hidden 64, as in real Qwen3 checkpoints.
    "qwen3_qk_norm": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0)),
    "phi3_fused_window": ("phi3", dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=8)),
    "granite_multipliers": ("granite", dict(num_attention_heads=4, num_key_value_heads=2, embedding_multiplier=6.0,
                                            residual_multiplier=0.3, attention_multiplier=0.09, logits_scaling=4.0)),
    # Soft-caps small enough to clip; a window shorter than the prompt on
    # layer 0 (layer 1 global); query_pre_attn_scalar != head_dim.
    "gemma2_softcap_window": ("gemma2", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                             query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
                                             final_logit_softcapping=10.0, sliding_window=5, rms_norm_eps=1e-6,
                                             tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh")),
    # Five local layers (window 5, RoPE base 10k) to one global (1M, linear scaling 8).
    "gemma3_local_global": ("gemma3_text", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                                num_hidden_layers=6, query_pre_attn_scalar=32, sliding_window=5,
                                                sliding_window_pattern=6, rope_theta=1000000.0,
                                                rope_local_base_freq=10000.0,
                                                rope_scaling=dict(rope_type="linear", factor=8.0),
                                                rms_norm_eps=1e-6, tie_word_embeddings=True,
                                                hidden_activation="gelu_pytorch_tanh")),
    "olmo2_post_norms": ("olmo2", dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                                       rms_norm_eps=1e-6)),
    # YaRN over an original context of 16 (Qwen's long-context configs).
    "qwen2_yarn": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                                 rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                   original_max_position_embeddings=16))),
    # Sparse MoE: experts that differ, top-k of more experts than chosen.
    "mixtral_top2_of_4": ("mixtral", dict(num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                          num_experts_per_tok=2)),
    "qwen2moe_shared_expert": ("qwen2_moe", dict(num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                                 num_experts_per_tok=2, moe_intermediate_size=48,
                                                 shared_expert_intermediate_size=96, norm_topk_prob=False)),
    "qwen3moe_top3_of_8": ("qwen3_moe", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                             num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                                             norm_topk_prob=True, rope_theta=1000000.0)),
}

HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                    "qwen3": "Qwen3ForCausalLM", "granite": "GraniteForCausalLM", "phi3": "Phi3ForCausalLM",
                    "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
                    "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                    "qwen3_moe": "Qwen3MoeForCausalLM"}
GGUF_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "granite": "granite",
             "phi3": "phi3", "gemma2": "gemma2", "gemma3_text": "gemma3", "olmo2": "olmo2", "mixtral": "llama",
             "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}


def make_model(arch, overrides, seed):
    rng = np.random.default_rng(seed)
    cfg = dict(model_type=arch, architectures=[HF_ARCHITECTURES[arch]],
               vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
               rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    cfg.update(overrides)
    if arch in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        cfg["use_sliding_window"] = False
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    d, ff, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def mat(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    gemma = arch in ref.GEMMA

    def norm(n):
        # Gemma's HF files store w of (1 + w): values near 0 there.
        return ((0.0 if gemma else 1.0) + 0.1 * rng.standard_normal(n)).astype(np.float32)

    W = {"model.embed_tokens.weight": rng.standard_normal((V, d)).astype(np.float32),
         "model.norm.weight": norm(d)}
    if not cfg["tie_word_embeddings"]:
        W["lm_head.weight"] = mat(V, d)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        H, KV = ref.layer_heads(cfg, l)
        ff = ref.layer_ff(cfg, l)
        W[p + "input_layernorm.weight"] = norm(d)
        W[p + "post_attention_layernorm.weight"] = norm(d)
        W[p + "self_attn.q_proj.weight"] = mat(H * hd, d)
        W[p + "self_attn.k_proj.weight"] = mat(KV * hd, d)
        W[p + "self_attn.v_proj.weight"] = mat(KV * hd, d)
        W[p + "self_attn.o_proj.weight"] = mat(d, H * hd)
        W[p + "mlp.gate_proj.weight"] = mat(ff, d)
        W[p + "mlp.up_proj.weight"] = mat(ff, d)
        W[p + "mlp.down_proj.weight"] = mat(d, ff)
        if arch in ("qwen2", "qwen2_moe"):
            for n, m in (("q", H), ("k", KV), ("v", KV)):
                W[p + f"self_attn.{n}_proj.bias"] = (0.1 * rng.standard_normal(m * hd)).astype(np.float32)
        if arch in ("qwen3", "gemma3_text", "qwen3_moe"):
            # Far from 1 so that leaving the norms out changes the logits clearly.
            base = 0.0 if gemma else 1.0
            W[p + "self_attn.q_norm.weight"] = (base + 0.5 * rng.standard_normal(hd)).astype(np.float32)
            W[p + "self_attn.k_norm.weight"] = (base + 0.5 * rng.standard_normal(hd)).astype(np.float32)
        if gemma:
            W[p + "pre_feedforward_layernorm.weight"] = norm(d)
            W[p + "post_feedforward_layernorm.weight"] = norm(d)
        if arch == "olmo2":  # norms after the blocks; q/k norms over the whole projection
            del W[p + "input_layernorm.weight"]
            W[p + "post_feedforward_layernorm.weight"] = norm(d)
            W[p + "self_attn.q_norm.weight"] = (1.0 + 0.5 * rng.standard_normal(H * hd)).astype(np.float32)
            W[p + "self_attn.k_norm.weight"] = (1.0 + 0.5 * rng.standard_normal(KV * hd)).astype(np.float32)
        E = ref.moe_experts(cfg)
        if E:  # experts replace the dense FFN
            for n in ("gate_proj", "up_proj", "down_proj"):
                del W[p + "mlp." + n + ".weight"]
            mixtral = arch == "mixtral"
            base = p + ("block_sparse_moe." if mixtral else "mlp.")
            eff = cfg.get("moe_intermediate_size", ff)
            W[base + "gate.weight"] = mat(E, d)
            for e in range(E):
                ex = f"{base}experts.{e}."
                names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
                W[ex + names[0] + ".weight"] = mat(eff, d)
                W[ex + names[1] + ".weight"] = mat(eff, d)
                W[ex + names[2] + ".weight"] = mat(d, eff)
            sff = cfg.get("shared_expert_intermediate_size")
            if sff:
                W[p + "mlp.shared_expert_gate.weight"] = mat(1, d)
                for n, shape in (("gate_proj", (sff, d)), ("up_proj", (sff, d)), ("down_proj", (d, sff))):
                    W[p + "mlp.shared_expert." + n + ".weight"] = mat(*shape)
    return cfg, W


def fused_for_phi3(cfg, W):
    """Phi-3's HF layout: Q, K, V rows in one qkv_proj, gate and up rows in one gate_up_proj."""
    if cfg["model_type"] != "phi3":
        return W
    out = dict(W)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [out.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
        out[p + "mlp.gate_up_proj.weight"] = np.concatenate([out.pop(p + "mlp.gate_proj.weight"),
                                                              out.pop(p + "mlp.up_proj.weight")])
    return out


def write_hf(folder, cfg, W, dtype="F32"):
    W = fused_for_phi3(cfg, W)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        # head_dim only where it is not hidden / heads (as in real configs).
        implied = cfg["hidden_size"] // cfg["num_attention_heads"]
        json.dump({k: v for k, v in cfg.items() if k != "head_dim" or v != implied}, f)
    mf.write_safetensors(os.path.join(folder, "model.safetensors"), W, dtype)


def write_gguf(path, cfg, W, gtype=mf.GGML_F32, legacy_experts=False):
    """legacy_experts: each MoE expert in its own 2-D tensor (blk.N.ffn_gate.E.weight), as
    llama.cpp wrote Mixtral before April 2024, instead of the stacked 3-D ones."""
    arch = GGUF_ARCH[cfg["model_type"]]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    gemma = cfg["model_type"] in ref.GEMMA

    def nrm(name):  # llama.cpp's converter stores Gemma's norms as 1 + w
        return (W[name] + 1.0 if gemma else W[name]).astype(np.float32)

    a = arch + "."
    kvs = [("general.architecture", "str", arch), ("general.name", "str", "ref-test"),
           (a + "context_length", "u32", cfg["max_position_embeddings"]),
           (a + "embedding_length", "u32", cfg["hidden_size"]),
           (a + "block_count", "u32", cfg["num_hidden_layers"]),
           (a + "feed_forward_length", "u32", cfg["intermediate_size"]),
           (a + "attention.head_count", "u32", H), (a + "attention.head_count_kv", "u32", KV),
           (a + "attention.layer_norm_rms_epsilon", "f32", cfg["rms_norm_eps"]),
           (a + "rope.freq_base", "f32", cfg["rope_theta"]),
           (a + "rope.dimension_count", "u32", cfg["head_dim"]),
           (a + "vocab_size", "u32", cfg["vocab_size"])]
    for cfg_key, gguf_key in (("layer_ff", "feed_forward_length"), ("layer_heads", "attention.head_count"),
                              ("layer_kv_heads", "attention.head_count_kv")):
        if cfg_key in cfg:  # per-layer widths: an INT32 array, as llama.cpp's converter writes them
            kvs = [kv for kv in kvs if kv[0] != a + gguf_key] + [(a + gguf_key, ("arr", "i32"), cfg[cfg_key])]
    if cfg.get("sliding_window"):
        kvs.append((a + "attention.sliding_window", "u32", cfg["sliding_window"]))
    if cfg["head_dim"] != cfg["hidden_size"] // H:
        kvs += [(a + "attention.key_length", "u32", cfg["head_dim"]), (a + "attention.value_length", "u32", cfg["head_dim"])]
    for key, gguf_key in (("embedding_multiplier", "embedding_scale"), ("residual_multiplier", "residual_scale"),
                          ("attention_multiplier", "attention.scale"), ("logits_scaling", "logit_scale")):
        if key in cfg:  # granite: llama.cpp's keys
            kvs.append((a + gguf_key, "f32", cfg[key]))
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(key):  # gemma2
            kvs.append((a + key, "f32", cfg[key]))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "yarn":
        kvs += [(a + "rope.scaling.type", "str", "yarn"), (a + "rope.scaling.factor", "f32", rs["factor"]),
                (a + "rope.scaling.original_context_length", "u32", rs["original_max_position_embeddings"])]
    if rs.get("rope_type") == "longrope":  # llama.cpp's phi3: the factors as tensors, plus these keys
        kvs += [(a + "rope.scaling.original_context_length", "u32", cfg["original_max_position_embeddings"]),
                (a + "rope.scaling.attn_factor", "f32", ref.rope_mscale(cfg))]
    if cfg.get("query_pre_attn_scalar", cfg["head_dim"]) != cfg["head_dim"]:
        # llama.cpp derives the scale from the model size; infera's convert writes it.
        kvs.append((a + "attention.scale", "f32", cfg["query_pre_attn_scalar"] ** -0.5))
    E = ref.moe_experts(cfg)
    if E:  # llama.cpp's keys
        kvs += [(a + "expert_count", "u32", E), (a + "expert_used_count", "u32", cfg["num_experts_per_tok"])]
        if "moe_intermediate_size" in cfg:
            kvs.append((a + "expert_feed_forward_length", "u32", cfg["moe_intermediate_size"]))
        if cfg.get("shared_expert_intermediate_size"):
            kvs.append((a + "expert_shared_feed_forward_length", "u32", cfg["shared_expert_intermediate_size"]))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "linear":
        kvs += [(a + "rope.scaling.type", "str", "linear"), (a + "rope.scaling.factor", "f32", rs["factor"])]
    permute = arch in ("llama", "granite")  # qwen2 / qwen3 keep the HF rotary layout (NEOX)
    T = [("token_embd.weight", W["model.embed_tokens.weight"], gtype),
         ("output_norm.weight", nrm("model.norm.weight"), mf.GGML_F32)]
    if "lm_head.weight" in W:
        T.append(("output.weight", W["lm_head.weight"], gtype))
    if (cfg.get("rope_scaling") or {}).get("rope_type") == "longrope":
        rs = cfg["rope_scaling"]
        T += [("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32), mf.GGML_F32),
              ("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32), mf.GGML_F32)]
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        base = 1.0 / cfg["rope_theta"] ** (np.arange(0, cfg["head_dim"], 2) / cfg["head_dim"])
        factors = base / ref.inv_frequencies(cfg)
        T.append(("rope_freqs.weight", factors.astype(np.float32), mf.GGML_F32))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        H, KV = ref.layer_heads(cfg, l)
        q, k = W[p + "self_attn.q_proj.weight"], W[p + "self_attn.k_proj.weight"]
        if permute:
            q, k = mf.permute_for_gguf(q, H), mf.permute_for_gguf(k, KV)
        b = f"blk.{l}."
        if arch in ("gemma2", "gemma3", "olmo2"):
            if arch != "olmo2":
                T += [(b + "attn_norm.weight", nrm(p + "input_layernorm.weight"), mf.GGML_F32),
                      (b + "ffn_norm.weight", nrm(p + "pre_feedforward_layernorm.weight"), mf.GGML_F32)]
            T += [(b + "attn_q.weight", q, gtype), (b + "attn_k.weight", k, gtype),
                  (b + "attn_v.weight", W[p + "self_attn.v_proj.weight"], gtype),
                  (b + "attn_output.weight", W[p + "self_attn.o_proj.weight"], gtype),
                  (b + "post_attention_norm.weight", nrm(p + "post_attention_layernorm.weight"), mf.GGML_F32),
                  (b + "ffn_gate.weight", W[p + "mlp.gate_proj.weight"], gtype),
                  (b + "ffn_up.weight", W[p + "mlp.up_proj.weight"], gtype),
                  (b + "ffn_down.weight", W[p + "mlp.down_proj.weight"], gtype),
                  (b + "post_ffw_norm.weight", nrm(p + "post_feedforward_layernorm.weight"), mf.GGML_F32)]
            if p + "self_attn.q_norm.weight" in W:
                T += [(b + f"attn_{n}_norm.weight", nrm(p + f"self_attn.{n}_norm.weight"), mf.GGML_F32) for n in "qk"]
            continue
        if arch == "phi3":  # llama.cpp's fused tensors
            T += [(b + "attn_norm.weight", W[p + "input_layernorm.weight"], mf.GGML_F32),
                  (b + "attn_qkv.weight", np.concatenate([q, k, W[p + "self_attn.v_proj.weight"]]), gtype),
                  (b + "attn_output.weight", W[p + "self_attn.o_proj.weight"], gtype),
                  (b + "ffn_norm.weight", W[p + "post_attention_layernorm.weight"], mf.GGML_F32),
                  (b + "ffn_up.weight", np.concatenate([W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"]]),
                   gtype),
                  (b + "ffn_down.weight", W[p + "mlp.down_proj.weight"], gtype)]
            continue
        T += [(b + "attn_norm.weight", W[p + "input_layernorm.weight"], mf.GGML_F32),
              (b + "attn_q.weight", q, gtype), (b + "attn_k.weight", k, gtype),
              (b + "attn_v.weight", W[p + "self_attn.v_proj.weight"], gtype),
              (b + "attn_output.weight", W[p + "self_attn.o_proj.weight"], gtype),
              (b + "ffn_norm.weight", W[p + "post_attention_layernorm.weight"], mf.GGML_F32)]
        if E:  # the router (f32, as llama.cpp keeps it) and each expert kind stacked [E, n_out, n_in]
            mixtral = cfg["model_type"] == "mixtral"
            base = p + ("block_sparse_moe." if mixtral else "mlp.")
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            T.append((b + "ffn_gate_inp.weight", W[base + "gate.weight"], mf.GGML_F32))
            for gguf, n in zip(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), names):
                if legacy_experts:
                    T += [(b + gguf.replace("_exps", f".{e}") + ".weight", W[f"{base}experts.{e}.{n}.weight"], gtype)
                          for e in range(E)]
                else:
                    T.append((b + gguf + ".weight",
                              np.stack([W[f"{base}experts.{e}.{n}.weight"] for e in range(E)]), gtype))
            if cfg.get("shared_expert_intermediate_size"):
                sh = p + "mlp.shared_expert."
                T += [(b + "ffn_gate_inp_shexp.weight", W[p + "mlp.shared_expert_gate.weight"], mf.GGML_F32),
                      (b + "ffn_gate_shexp.weight", W[sh + "gate_proj.weight"], gtype),
                      (b + "ffn_up_shexp.weight", W[sh + "up_proj.weight"], gtype),
                      (b + "ffn_down_shexp.weight", W[sh + "down_proj.weight"], gtype)]
        else:
            T += [(b + "ffn_gate.weight", W[p + "mlp.gate_proj.weight"], gtype),
                  (b + "ffn_up.weight", W[p + "mlp.up_proj.weight"], gtype),
                  (b + "ffn_down.weight", W[p + "mlp.down_proj.weight"], gtype)]
        if arch in ("qwen2", "qwen2moe"):
            T += [(b + f"attn_{n}.bias", W[p + f"self_attn.{n}_proj.bias"], mf.GGML_F32) for n in "qkv"]
        if arch in ("qwen3", "qwen3moe"):
            T += [(b + f"attn_{n}_norm.weight", W[p + f"self_attn.{n}_norm.weight"], mf.GGML_F32) for n in "qk"]
    mf.write_gguf(path, kvs, T)


def infera_logits(model, tokens, mode="full"):
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        subprocess.run([INFERA, "--log-level", "warn", "eval-logits", "--model", model,
                        "--tokens", " ".join(map(str, tokens)), "--mode", mode, "--out", out.name],
                       check=True, capture_output=True)
        return np.fromfile(out.name, dtype=np.float32).reshape(len(tokens), -1)


def infera_greedy(model, tokens, n):
    r = subprocess.run([INFERA, "--log-level", "warn", "eval-logits", "--model", model,
                        "--tokens", " ".join(map(str, tokens)), "--greedy", str(n)],
                       check=True, capture_output=True, text=True)
    return [int(t) for t in r.stdout.split()]


def max_rel_err(a, b):
    """Worst over positions of max|a-b| / max|b| (per position)."""
    return float(np.max(np.max(np.abs(a - b), axis=-1) / np.max(np.abs(b), axis=-1)))


class ReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_variant(self, name, arch, overrides, seed):
        cfg, W = make_model(arch, overrides, seed)
        rng = np.random.default_rng(seed + 1)
        tokens = [int(t) for t in rng.integers(0, cfg["vocab_size"], 24)]
        expected = ref.forward(cfg, {k: v.astype(np.float64) for k, v in W.items()}, tokens)
        hf = os.path.join(self.tmp.name, name + "_hf")
        gg = os.path.join(self.tmp.name, name + ".gguf")
        write_hf(hf, cfg, W)
        write_gguf(gg, cfg, W)
        results = {}
        for label, path in (("gguf", gg), ("safetensors", hf)):
            got = infera_logits(path, tokens)
            err = max_rel_err(got, expected)
            self.assertLess(err, 1e-4, f"{name} {label}: max relative error {err:.2e}")
            results[label] = got
        # The same model in both formats gives the same logits.
        self.assertLess(max_rel_err(results["gguf"], results["safetensors"]), 1e-5)
        # Greedy decoding agrees for 32 steps.
        want = ref.greedy(cfg, {k: v.astype(np.float64) for k, v in W.items()}, tokens[:8], 32)
        for label, path in (("gguf", gg), ("safetensors", hf)):
            self.assertEqual(infera_greedy(path, tokens[:8], 32), want, f"{name} {label} greedy")
        return cfg, W, tokens

    def test_llama_gqa(self):
        self.check_variant("llama_gqa", *VARIANTS["llama_gqa"], seed=1)

    def test_llama_mqa_tied(self):
        self.check_variant("llama_mqa_tied", *VARIANTS["llama_mqa_tied"], seed=2)

    def test_llama3_rope_scaling(self):
        self.check_variant("llama3_rope_scaling", *VARIANTS["llama3_rope_scaling"], seed=3)

    def test_qwen2_bias_tied(self):
        self.check_variant("qwen2_bias_tied", *VARIANTS["qwen2_bias_tied"], seed=4)

    def test_mistral_sliding_window(self):
        self.check_variant("mistral_sliding_window", *VARIANTS["mistral_sliding_window"], seed=5)

    def test_qwen3_qk_norm(self):
        cfg, W, tokens = self.check_variant("qwen3_qk_norm", *VARIANTS["qwen3_qk_norm"], seed=10)
        # The test can fail: without the per-head Q/K norms the reference is far off infera.
        without = ref.forward(cfg, {k: v.astype(np.float64) for k, v in W.items()}, tokens, qk_norm=False)
        got = infera_logits(os.path.join(self.tmp.name, "qwen3_qk_norm.gguf"), tokens)
        self.assertGreater(max_rel_err(got, without), 1e-2)
        # convert HF -> GGUF keeps the norms, under llama.cpp's names.
        out = os.path.join(self.tmp.name, "qwen3_conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", os.path.join(self.tmp.name, "qwen3_qk_norm_hf"), out],
                       check=True, capture_output=True)
        self.assertLess(max_rel_err(infera_logits(out, tokens), got), 1e-6)
        r = subprocess.run([INFERA, "info", out], capture_output=True, text=True)
        self.assertIn("qwen3", r.stdout)

    def test_phi3_fused_tensors(self):
        cfg, W, tokens = self.check_variant("phi3_fused_window", *VARIANTS["phi3_fused_window"], seed=12)
        gg = os.path.join(self.tmp.name, "phi3_fused_window.gguf")
        got = infera_logits(gg, tokens)
        # Reading the fused halves the other way round (up, then gate) is far off: the split matters.
        swapped = dict(W)
        for l in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            swapped[p + "mlp.gate_proj.weight"], swapped[p + "mlp.up_proj.weight"] = \
                W[p + "mlp.up_proj.weight"], W[p + "mlp.gate_proj.weight"]
        wrong = ref.forward(cfg, {k: v.astype(np.float64) for k, v in swapped.items()}, tokens)
        self.assertGreater(max_rel_err(got, wrong), 1e-2)
        # convert (HF -> GGUF) and quantize write the fused tensors back as one.
        conv = os.path.join(self.tmp.name, "phi3_conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", os.path.join(self.tmp.name, "phi3_fused_window_hf"),
                        conv], check=True, capture_output=True)
        self.assertLess(max_rel_err(infera_logits(conv, tokens), got), 1e-6)
        q8 = os.path.join(self.tmp.name, "phi3_q8.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "quantize", gg, q8, "--type", "q8_0"], check=True,
                       capture_output=True)
        self.assertLess(max_rel_err(infera_logits(q8, tokens), got), 5e-2)
        # LongRoPE (the 128k variants): the long factors past the original
        # context of 16 (every run here), and the attention factor.
        rng = np.random.default_rng(3)
        half = cfg["head_dim"] // 2
        long_cfg = dict(cfg, original_max_position_embeddings=16,
                        rope_scaling=dict(rope_type="longrope",
                                          short_factor=[float(x) for x in 1 + rng.random(half)],
                                          long_factor=[float(x) for x in 1 + 8 * rng.random(half)]))
        hf = os.path.join(self.tmp.name, "phi3_longrope_hf")
        write_hf(hf, long_cfg, W)
        gl = os.path.join(self.tmp.name, "phi3_longrope.gguf")
        write_gguf(gl, long_cfg, W)
        Wd = {k: v.astype(np.float64) for k, v in W.items()}
        want = ref.forward(long_cfg, Wd, tokens)
        for path in (hf, gl):
            self.assertLess(max_rel_err(infera_logits(path, tokens), want), 1e-4, path)
        short = ref.forward(dict(long_cfg, context_in_use=16), Wd, tokens)
        self.assertGreater(max_rel_err(infera_logits(gl, tokens), short), 1e-2)
        r = subprocess.run([INFERA, "info", hf], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("longrope", r.stdout)
        # convert keeps the factors (as llama.cpp's tensors) and the keys.
        conv_long = os.path.join(self.tmp.name, "phi3_longrope_conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", hf, conv_long], check=True, capture_output=True)
        self.assertLess(max_rel_err(infera_logits(conv_long, tokens), want), 1e-4)

    def test_granite_multipliers(self):
        cfg, W, tokens = self.check_variant("granite_multipliers", *VARIANTS["granite_multipliers"], seed=11)
        got = infera_logits(os.path.join(self.tmp.name, "granite_multipliers.gguf"), tokens)
        Wd = {k: v.astype(np.float64) for k, v in W.items()}
        # Each multiplier matters: the reference without any one of them is far off.
        for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            without = ref.forward({k: v for k, v in cfg.items() if k != key}, Wd, tokens)
            self.assertGreater(max_rel_err(got, without), 1e-2, key)
        out = os.path.join(self.tmp.name, "granite_conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", os.path.join(self.tmp.name, "granite_multipliers_hf"),
                        out], check=True, capture_output=True)
        self.assertLess(max_rel_err(infera_logits(out, tokens), got), 1e-6)

    def check_features_matter(self, name, cfg, W, tokens, features):
        """The test can fail: the reference without each feature is far off infera."""
        got = infera_logits(os.path.join(self.tmp.name, name + ".gguf"), tokens)
        Wd = {k: v.astype(np.float64) for k, v in W.items()}
        for feature in features:
            without = ref.forward(cfg, Wd, tokens, without=(feature,))
            self.assertGreater(max_rel_err(got, without), 1e-2, f"{name} without {feature}")
        return got

    def check_convert_and_chunks(self, name, tokens, got):
        """convert HF -> GGUF gives the same function; incremental decode and
        chunked prefill (windows across steps and KV blocks) equal the full pass."""
        out = os.path.join(self.tmp.name, name + "_conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", os.path.join(self.tmp.name, name + "_hf"), out],
                       check=True, capture_output=True)
        self.assertLess(max_rel_err(infera_logits(out, tokens), got), 1e-6)
        gg = os.path.join(self.tmp.name, name + ".gguf")
        for mode in ("incremental", "chunk:3"):
            self.assertLess(max_rel_err(infera_logits(gg, tokens, mode), got), 1e-5, f"{name} {mode}")

    def test_gemma2_softcap_window(self):
        name = "gemma2_softcap_window"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=13)
        got = self.check_features_matter(name, cfg, W, tokens, ("attn_softcap", "final_softcap", "window",
                                                                "post_norm", "norm_plus_one", "embed_scale", "gelu"))
        self.check_convert_and_chunks(name, tokens, got)
        r = subprocess.run([INFERA, "info", os.path.join(self.tmp.name, name + ".gguf")], capture_output=True, text=True)
        self.assertIn("gemma2", r.stdout)

    def test_gemma3_local_global(self):
        name = "gemma3_local_global"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=14)
        got = self.check_features_matter(name, cfg, W, tokens, ("qk_norm", "window", "local_rope", "post_norm",
                                                                "norm_plus_one"))
        self.check_convert_and_chunks(name, tokens, got)
        # Another layer pattern than the family's is refused, not run wrongly.
        hf = os.path.join(self.tmp.name, "gemma3_pattern_hf")
        write_hf(hf, dict(cfg, sliding_window_pattern=3), W)
        r = subprocess.run([INFERA, "info", hf], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("sliding_window_pattern", r.stderr)
        # The multimodal checkpoints (Gemma3ForConditionalGeneration, 4B and
        # up): the language model's config is text_config, leaving out what
        # equals Gemma3TextConfig's defaults (here rms_norm_eps,
        # rope_local_base_freq, sliding_window_pattern, tie_word_embeddings),
        # its tensors sit under a prefix (both transformers layouts), and the
        # vision tower is ignored.
        defaults = ("rms_norm_eps", "rope_local_base_freq", "sliding_window_pattern", "tie_word_embeddings",
                    "architectures")
        text_config = {k: v for k, v in cfg.items() if k not in defaults}
        for layout, model_prefix, head in (("old", "language_model.model.", "language_model.lm_head."),
                                           ("new", "model.language_model.", "lm_head.")):
            mm = os.path.join(self.tmp.name, "gemma3_mm_" + layout)
            os.makedirs(mm, exist_ok=True)
            with open(os.path.join(mm, "config.json"), "w") as f:
                json.dump({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                           "text_config": text_config, "vision_config": {"model_type": "siglip_vision_model"},
                           "mm_tokens_per_image": 256}, f)
            Wm = {(model_prefix + k[len("model."):]) if k.startswith("model.") else head + k[len("lm_head."):]: v
                  for k, v in W.items()}
            Wm["vision_tower.vision_model.embeddings.patch_embedding.weight"] = np.ones((4, 3), np.float32)
            Wm["multi_modal_projector.mm_input_projection_weight"] = np.ones((4, 4), np.float32)
            mf.write_safetensors(os.path.join(mm, "model.safetensors"), Wm, "F32")
            self.assertLess(max_rel_err(infera_logits(mm, tokens), got), 1e-6, layout)
        r = subprocess.run([INFERA, "info", mm], capture_output=True, text=True)
        self.assertIn("gemma3", r.stdout)
        with open(os.path.join(mm, "config.json"), "w") as f:
            json.dump({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3"}, f)
        r = subprocess.run([INFERA, "info", mm], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("text_config", r.stderr)

    def test_olmo2_post_norms(self):
        name = "olmo2_post_norms"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=15)
        got = self.check_features_matter(name, cfg, W, tokens, ("qk_norm", "post_norm"))
        self.check_convert_and_chunks(name, tokens, got)

    def test_qwen2_yarn(self):
        name = "qwen2_yarn"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=19)
        got = infera_logits(os.path.join(self.tmp.name, name + ".gguf"), tokens)
        without = ref.forward(dict(cfg, rope_scaling=None), {k: v.astype(np.float64) for k, v in W.items()}, tokens)
        self.assertGreater(max_rel_err(got, without), 1e-2)
        self.check_convert_and_chunks(name, tokens, got)

    def test_mixtral_top2_of_4(self):
        name = "mixtral_top2_of_4"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=16)
        got = self.check_features_matter(name, cfg, W, tokens, ("renorm",))
        self.check_convert_and_chunks(name, tokens, got)
        # Every expert is chosen somewhere, so the test covers them all.
        Wd = {k: v.astype(np.float64) for k, v in W.items()}
        for l in range(cfg["num_hidden_layers"]):
            dropped = dict(Wd)
            e = f"model.layers.{l}.block_sparse_moe.experts."
            for k in range(cfg["num_local_experts"]):
                dropped[e + f"{k}.w2.weight"] = np.zeros_like(Wd[e + f"{k}.w2.weight"])
                self.assertGreater(max_rel_err(got, ref.forward(cfg, dropped, tokens)), 1e-3, f"layer {l} expert {k}")
                dropped[e + f"{k}.w2.weight"] = Wd[e + f"{k}.w2.weight"]
        # Older Mixtral GGUFs keep one tensor per expert: the same function, and
        # quantize rewrites them stacked.
        legacy = os.path.join(self.tmp.name, "mixtral_legacy.gguf")
        write_gguf(legacy, cfg, W, legacy_experts=True)
        self.assertLess(max_rel_err(infera_logits(legacy, tokens), got), 1e-6)
        q8 = os.path.join(self.tmp.name, "mixtral_legacy_q8.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "quantize", legacy, q8, "--type", "q8_0"], check=True,
                       capture_output=True)
        self.assertLess(max_rel_err(infera_logits(q8, tokens), got), 1e-1)
        r = subprocess.run([INFERA, "--log-level", "warn", "dump-tensor", "-m", q8, "--tensor",
                            "blk.0.ffn_gate_exps.weight", "--out", os.path.join(self.tmp.name, "exps.f32")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_qwen2moe_shared_expert(self):
        name = "qwen2moe_shared_expert"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=17)
        got = self.check_features_matter(name, cfg, W, tokens, ("shared_expert",))
        self.check_convert_and_chunks(name, tokens, got)

    def test_qwen3moe_top3_of_8(self):
        name = "qwen3moe_top3_of_8"
        cfg, W, tokens = self.check_variant(name, *VARIANTS[name], seed=18)
        got = self.check_features_matter(name, cfg, W, tokens, ("renorm", "qk_norm"))
        self.check_convert_and_chunks(name, tokens, got)
        # Quantized experts: q8_0 close to f32 at most positions (the router
        # stays f32, but quantized inputs may flip a near-tie in routing).
        q8 = os.path.join(self.tmp.name, "qwen3moe_q8.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "quantize", os.path.join(self.tmp.name, name + ".gguf"), q8,
                        "--type", "q8_0"], check=True, capture_output=True)
        q = infera_logits(q8, tokens)
        per_pos = np.max(np.abs(q - got), axis=-1) / np.max(np.abs(got), axis=-1)
        self.assertLess(float(np.median(per_pos)), 5e-2)
        r = subprocess.run([INFERA, "info", q8], capture_output=True, text=True)
        self.assertIn("qwen3moe", r.stdout)
        self.assertIn("experts:           8, 3 used per token, feed-forward 32", r.stdout)
        self.assertIn("f32: ", r.stdout)  # the routers

    def test_f16_and_bf16_weights(self):
        cfg, W = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), 6)
        tokens = list(range(3, 27))
        for dtype, gtype, rnd in (("F16", mf.GGML_F16, lambda a: a.astype(np.float16).astype(np.float64)),
                                  ("BF16", mf.GGML_BF16, lambda a: mf.from_bf16_bits(mf.to_bf16_bits(a)).astype(np.float64))):
            # Matrices are stored in the low-precision type, norms in f32 (GGUF) / dtype (HF).
            hf = os.path.join(self.tmp.name, "lp_" + dtype)
            write_hf(hf, cfg, W, dtype)
            gg = os.path.join(self.tmp.name, "lp_" + dtype + ".gguf")
            write_gguf(gg, cfg, W, gtype)
            Wr_hf = {k: rnd(v) for k, v in W.items()}
            Wr_gg = {k: (rnd(v) if v.ndim == 2 else v.astype(np.float64)) for k, v in W.items()}
            for path, Wr in ((gg, Wr_gg), (hf, Wr_hf)):
                err = max_rel_err(infera_logits(path, tokens), ref.forward(cfg, Wr, tokens))
                self.assertLess(err, 1e-4, f"{dtype} {path}: {err:.2e}")

    def test_incremental_equals_full(self):
        cfg, W = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), 7)
        gg = os.path.join(self.tmp.name, "inc.gguf")
        write_gguf(gg, cfg, W)
        tokens = list(range(5, 45))
        full = infera_logits(gg, tokens, "full")
        for mode in ("incremental", "chunk:5"):
            self.assertLess(max_rel_err(infera_logits(gg, tokens, mode), full), 1e-5, mode)

    def test_hf_eos_ids_from_config_files(self):
        cfg, W = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), 9)
        hf = os.path.join(self.tmp.name, "eos_hf")
        write_hf(hf, dict(cfg, eos_token_id=2), W)
        with open(os.path.join(hf, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": [2, 7, 11]}, f)
        r = subprocess.run([INFERA, "info", hf], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("eos ids (config):  2 7 11", r.stdout)
        with open(os.path.join(hf, "generation_config.json"), "w") as f:
            f.write('{"eos_token_id": "x"}')
        r = subprocess.run([INFERA, "info", hf], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("generation_config.json", r.stderr)

    def test_per_layer_widths(self):
        """A structurally pruned model: heads, KV heads and FFN width differ per
        layer (GGUF INT32 arrays, as llama.cpp reads them). Llama (Q/K row
        permutation per layer), qwen2 (biases) and olmo2 (q/k norms over the
        whole projection) each against the reference, in full and chunked
        passes, and after quantize (which keeps the arrays)."""
        widths = dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=160,
                      layer_heads=[4, 2, 3], layer_kv_heads=[2, 1, 1], layer_ff=[160, 96, 40])
        for arch, seed in (("llama", 21), ("qwen2", 22), ("olmo2", 23)):
            cfg, W = make_model(arch, widths, seed)
            gg = os.path.join(self.tmp.name, f"pruned_{arch}.gguf")
            write_gguf(gg, cfg, W)
            tokens = [int(t) for t in np.random.default_rng(seed).integers(0, cfg["vocab_size"], 24)]
            Wd = {k: v.astype(np.float64) for k, v in W.items()}
            want = ref.forward(cfg, Wd, tokens)
            got = infera_logits(gg, tokens)
            self.assertLess(max_rel_err(got, want), 1e-4, arch)
            self.assertLess(max_rel_err(infera_logits(gg, tokens, "chunk:5"), got), 1e-5, arch)
            self.assertEqual(infera_greedy(gg, tokens[:8], 16), ref.greedy(cfg, Wd, tokens[:8], 16), arch)
            q8 = os.path.join(self.tmp.name, f"pruned_{arch}_q8.gguf")
            subprocess.run([INFERA, "--log-level", "warn", "quantize", gg, q8, "--type", "q8_0"], check=True,
                           capture_output=True)
            self.assertLess(max_rel_err(infera_logits(q8, tokens), got), 1e-1, arch)  # int8 noise on a random model
        r = subprocess.run([INFERA, "info", q8], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("per layer:         4/2/160 2/1/96 3/1/40", r.stdout)
        # A width array with the wrong length is refused with one clear line.
        bad = dict(cfg, layer_ff=[160, 96])
        bad_path = os.path.join(self.tmp.name, "pruned_bad.gguf")
        write_gguf(bad_path, dict(bad, layer_ff=[160, 96]), W)
        r = subprocess.run([INFERA, "info", bad_path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("feed_forward_length has 2 entries for 3 layers", r.stderr)

    def test_convert_hf_to_gguf_matches(self):
        cfg, W = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), 8)
        hf = os.path.join(self.tmp.name, "conv_hf")
        write_hf(hf, cfg, W)
        out = os.path.join(self.tmp.name, "conv.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "convert", hf, out], check=True, capture_output=True)
        tokens = list(range(10, 30))
        self.assertLess(max_rel_err(infera_logits(out, tokens), infera_logits(hf, tokens)), 1e-6)


if __name__ == "__main__":
    unittest.main()
