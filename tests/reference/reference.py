"""Independent numpy forward pass of the decoder families (llama, mistral,
qwen2, qwen3, granite, phi3, gemma2, gemma3, olmo2, mixtral, qwen2moe,
qwen3moe) on Hugging Face-layout weights, in float64. Written from each
architecture's published description, not from infera's C++ code."""
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
    elif rs and rs.get("rope_type") == "yarn":
        # YaRN: interpolate (/ factor) the dims that turn fewer than beta_slow
        # times over the original context, keep those turning more than
        # beta_fast times, ramp linearly in between.
        factor, orig = rs["factor"], rs["original_max_position_embeddings"]
        fast, slow = rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0)

        def dim_of(rot):
            return hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
        low = max(math.floor(dim_of(fast)), 0)
        high = min(math.ceil(dim_of(slow)), hd - 1)
        if high == low:
            high += 0.001
        ramp = np.clip((np.arange(hd // 2) - low) / (high - low), 0, 1)
        keep = 1 - ramp
        inv = inv / factor * (1 - keep) + inv * keep
    elif rs and rs.get("rope_type") in ("longrope", "su"):
        # Phi-3 LongRoPE: per-frequency divisors, the long ones when the
        # context in use exceeds the original one.
        orig = rs.get("original_max_position_embeddings") or cfg["original_max_position_embeddings"]
        long = cfg.get("context_in_use", cfg["max_position_embeddings"]) > orig
        inv = inv / np.array(rs["long_factor" if long else "short_factor"], dtype=np.float64)
    return inv


def rope_mscale(cfg):
    """The factor YaRN and LongRoPE put on cos and sin."""
    rs = cfg.get("rope_scaling") or {}
    if rs.get("attention_factor"):
        return rs["attention_factor"]
    if rs.get("rope_type") == "yarn":
        return 0.1 * math.log(rs["factor"]) + 1.0
    if rs.get("rope_type") in ("longrope", "su"):
        orig = rs.get("original_max_position_embeddings") or cfg["original_max_position_embeddings"]
        factor = cfg["max_position_embeddings"] / orig
        return math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
    return 1.0


def rope_halves(x, pos, inv, mscale=1.0):
    """x [T, H, hd]; rotate (x[i], x[i + hd/2]) by pos * inv[i]; cos and sin times mscale."""
    ang = pos[:, None] * inv[None, :]
    cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


GEMMA = ("gemma2", "gemma3_text")
FEATURES = ("qk_norm", "attn_softcap", "final_softcap", "window", "local_rope", "post_norm", "norm_plus_one",
            "embed_scale", "gelu", "renorm", "shared_expert")


def layer_is_sliding(cfg, l):
    """Gemma 2: every other layer from the first; Gemma 3: five local to one
    global (sliding_window_pattern); others: every layer if a window is set."""
    if not cfg.get("sliding_window"):
        return False
    if cfg["model_type"] == "gemma2":
        return l % 2 == 0
    if cfg["model_type"] == "gemma3_text":
        return (l + 1) % cfg.get("sliding_window_pattern", 6) != 0
    return True


def softcap(x, cap):
    return cap * np.tanh(x / cap) if cap else x


def forward(cfg, W, tokens, qk_norm=True, without=(), capture=None, hidden=None):
    """Logits [T, vocab] for a token list, all positions (causal).
    qk_norm=False or a name from FEATURES in `without` leaves that feature
    out (to show each one matters). capture(weight_name, x) is shown the
    input x [T, n_in] of every dense layer weight (calibration statistics).
    hidden (a list): gets the final hidden states [T, n_embd] (after the final
    norm) appended: what embeddings pool."""
    seen = capture or (lambda name, x: None)
    if not qk_norm:
        without = tuple(without) + ("qk_norm",)
    off = set(without)
    T = len(tokens)
    mt = cfg["model_type"]
    gemma = mt in GEMMA
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    pos = np.arange(T, dtype=np.float64)
    inv_global = inv_frequencies(cfg)
    local_cfg = dict(cfg, rope_theta=cfg.get("rope_local_base_freq", 10000.0), rope_scaling=None)
    inv_local = inv_frequencies(local_cfg) if mt == "gemma3_text" and "local_rope" not in off else inv_global

    def norm(x, name):
        w = W[name]
        if gemma and "norm_plus_one" not in off:  # Gemma's RMSNorm applies (1 + w)
            w = 1.0 + w
        return rmsnorm(x, w, eps)

    # Granite's multipliers (absent: the plain Llama values).
    emb_mul = cfg.get("embedding_multiplier", 1.0)
    if gemma and "embed_scale" not in off:
        emb_mul *= math.sqrt(cfg["hidden_size"])
    res_mul = cfg.get("residual_multiplier", 1.0)
    att_mul = cfg.get("attention_multiplier") or 1.0 / math.sqrt(hd)
    if cfg.get("query_pre_attn_scalar"):
        att_mul = cfg["query_pre_attn_scalar"] ** -0.5
    attn_cap = 0 if "attn_softcap" in off else cfg.get("attn_logit_softcapping")
    final_cap = 0 if "final_softcap" in off else cfg.get("final_logit_softcapping")
    logit_div = cfg.get("logits_scaling", 1.0)
    pre_norm = mt != "olmo2"
    post_norm = (gemma or mt == "olmo2") and "post_norm" not in off
    x = W["model.embed_tokens.weight"][tokens].astype(np.float64) * emb_mul
    causal = np.tril(np.ones((T, T), dtype=bool))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        H, KV = layer_heads(cfg, l)  # pruned models: per layer
        mask = causal
        sliding = layer_is_sliding(cfg, l)
        if sliding and "window" not in off:
            mask = causal & ((np.arange(T)[:, None] - np.arange(T)[None, :]) < cfg["sliding_window"])
        inv = inv_local if sliding else inv_global
        h = norm(x, p + "input_layernorm.weight") if pre_norm else x
        for n in ("q", "k", "v"):
            seen(p + f"self_attn.{n}_proj.weight", h)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in W:
            q += W[p + "self_attn.q_proj.bias"]
            k += W[p + "self_attn.k_proj.bias"]
            v += W[p + "self_attn.v_proj.bias"]
        if mt == "olmo2" and "qk_norm" not in off:  # over the whole projection
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = q.reshape(T, H, hd), k.reshape(T, KV, hd)
        if mt != "olmo2" and "qk_norm" not in off and p + "self_attn.q_norm.weight" in W:  # per head
            q = norm(q, p + "self_attn.q_norm.weight")
            k = norm(k, p + "self_attn.k_norm.weight")
        ms = rope_mscale(cfg) if inv is inv_global else 1.0
        q = rope_halves(q, pos, inv, ms)
        k = rope_halves(k, pos, inv, ms)
        v = v.reshape(T, KV, hd)
        rep = H // KV
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        scores = softcap(np.einsum("thd,shd->hts", q, k) * att_mul, attn_cap)
        scores = np.where(mask[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", probs, v).reshape(T, H * hd)
        seen(p + "self_attn.o_proj.weight", att)
        a = att @ W[p + "self_attn.o_proj.weight"].T
        if post_norm:
            a = norm(a, p + "post_attention_layernorm.weight")
        x = x + res_mul * a
        if not pre_norm:
            h = x
        elif gemma:
            h = norm(x, p + "pre_feedforward_layernorm.weight")
        else:
            h = norm(x, p + "post_attention_layernorm.weight")
        def mlp(h, gate, up, down):
            seen(gate, h)
            seen(up, h)
            g, u = h @ W[gate].T, h @ W[up].T
            if gemma and "gelu" not in off:  # gelu_pytorch_tanh
                act = 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
            else:
                act = g / (1 + np.exp(-g))
            seen(down, act * u)
            return (act * u) @ W[down].T

        if moe_experts(cfg):
            f = moe(cfg, W, p, h, mlp, off)
        else:
            f = mlp(h, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight")
        if post_norm:
            f = norm(f, p + "post_feedforward_layernorm.weight")
        x = x + res_mul * f
    x = norm(x, "model.norm.weight")
    if hidden is not None:
        hidden.append(x)
    out = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return softcap((x @ out.T) / logit_div, final_cap)


def layer_heads(cfg, l):
    """(heads, KV heads) of layer l: per-layer lists (a structurally pruned
    model) or the model's."""
    H = cfg.get("layer_heads", [cfg["num_attention_heads"]] * cfg["num_hidden_layers"])[l]
    KV = cfg.get("layer_kv_heads", [cfg["num_key_value_heads"]] * cfg["num_hidden_layers"])[l]
    return H, KV


def layer_ff(cfg, l):
    return cfg.get("layer_ff", [cfg["intermediate_size"]] * cfg["num_hidden_layers"])[l]


def moe_experts(cfg):
    return cfg.get("num_local_experts") or cfg.get("num_experts") or 0


def moe(cfg, W, p, h, mlp, off):
    """Sparse MoE FFN: every token runs its top-k experts by router logit
    (ties: lower index), weighted by their softmax probabilities over all
    experts — renormalized over the k for Mixtral and norm_topk_prob — plus
    Qwen2-MoE's shared expert scaled by sigmoid(h · shared_expert_gate).
    `off` may hold "renorm" or "shared_expert" to leave those out."""
    E, K = moe_experts(cfg), cfg["num_experts_per_tok"]
    mixtral = cfg["model_type"] == "mixtral"
    base = p + ("block_sparse_moe." if mixtral else "mlp.")
    logits = h @ W[base + "gate.weight"].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    renorm = (mixtral or cfg.get("norm_topk_prob", False)) and "renorm" not in off
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-logits[t], kind="stable")[:K]
        w = probs[t, top]
        if renorm:
            w = w / w.sum()
        for e, we in zip(top, w):
            ex = f"{base}experts.{e}."
            out[t] += we * mlp(h[t:t + 1], *(ex + n + ".weight" for n in names))[0]
    if cfg.get("shared_expert_intermediate_size") and "shared_expert" not in off:
        s = 1 / (1 + np.exp(-(h @ W[p + "mlp.shared_expert_gate.weight"].T)))  # [T, 1]
        sh = p + "mlp.shared_expert."
        out += s * mlp(h, sh + "gate_proj.weight", sh + "up_proj.weight", sh + "down_proj.weight")
    return out


def greedy(cfg, W, tokens, n):
    toks = list(tokens)
    out = []
    for _ in range(n):
        nxt = int(np.argmax(forward(cfg, W, toks)[-1]))
        out.append(nxt)
        toks.append(nxt)
    return out
