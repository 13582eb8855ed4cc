"""Independent numpy forward pass of the Llama family (llama, mistral, qwen2,
qwen3, granite) on Hugging Face-layout weights, in float64. Written from the architecture's
published description, not from infera's C++ code."""
import math

import numpy as np


def inv_frequencies(cfg):
    hd = cfg["head_dim"]
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < high_wl:
                out.append(f)
            elif wl > low_wl:
                out.append(f / factor)
            else:
                smooth = (old / wl - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = np.array(out)
    elif rs and rs.get("rope_type") == "linear":
        inv = inv / rs["factor"]
    return inv


def rope_halves(x, pos, inv):
    """x [T, H, hd]; rotate (x[i], x[i + hd/2]) by pos * inv[i]."""
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def forward(cfg, W, tokens, qk_norm=True):
    """Logits [T, vocab] for a token list, all positions (causal).
    qk_norm=False leaves out Qwen3's per-head Q/K norms (to show they matter)."""
    T = len(tokens)
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    window = cfg.get("sliding_window") or 0
    pos = np.arange(T, dtype=np.float64)
    inv = inv_frequencies(cfg)
    # Granite's multipliers (absent: the plain Llama values).
    emb_mul = cfg.get("embedding_multiplier", 1.0)
    res_mul = cfg.get("residual_multiplier", 1.0)
    att_mul = cfg.get("attention_multiplier") or 1.0 / math.sqrt(hd)
    logit_div = cfg.get("logits_scaling", 1.0)
    x = W["model.embed_tokens.weight"][tokens].astype(np.float64) * emb_mul
    mask = np.tril(np.ones((T, T), dtype=bool))
    if window:
        mask &= (np.arange(T)[:, None] - np.arange(T)[None, :]) < window
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in W:
            q += W[p + "self_attn.q_proj.bias"]
            k += W[p + "self_attn.k_proj.bias"]
            v += W[p + "self_attn.v_proj.bias"]
        q, k = q.reshape(T, H, hd), k.reshape(T, KV, hd)
        if qk_norm and p + "self_attn.q_norm.weight" in W:  # Qwen3: RMSNorm over each head
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q = rope_halves(q, pos, inv)
        k = rope_halves(k, pos, inv)
        v = v.reshape(T, KV, hd)
        rep = H // KV
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) * att_mul
        scores = np.where(mask[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", probs, v).reshape(T, H * hd)
        x = x + res_mul * (att @ W[p + "self_attn.o_proj.weight"].T)
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + res_mul * (((g / (1 + np.exp(-g))) * u) @ W[p + "mlp.down_proj.weight"].T)
    x = rmsnorm(x, W["model.norm.weight"], eps)
    out = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return (x @ out.T) / logit_div


def greedy(cfg, W, tokens, n):
    toks = list(tokens)
    out = []
    for _ in range(n):
        nxt = int(np.argmax(forward(cfg, W, toks)[-1]))
        out.append(nxt)
        toks.append(nxt)
    return out
