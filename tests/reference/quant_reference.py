"""Independent numpy implementation of GGUF reading and of the dequantization
of each block format (written from the block layouts, vectorized over
blocks, float32 arithmetic in the same order as the C++ reference so results
can be compared bit for bit)."""
import struct

import numpy as np

# ggml type -> (name, elements per block, bytes per block)
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22),
         7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110),
         12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 17: ("iq2_xs", 256, 74), 20: ("iq4_nl", 32, 18),
         21: ("iq3_s", 256, 110),
         23: ("iq4_xs", 256, 136),
         26: ("i32", 1, 4), 30: ("bf16", 1, 2), 201: ("w8a8", 32, 34)}
IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
F32 = np.float32


def _codebook(name, dim):
    """A codebook [512, dim] of magnitude bytes, parsed from the C++ source's
    data file: the format's table, not an implementation."""
    import os
    import re
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "tensor", name)
    with open(path) as f:
        words = [int(v, 16) for v in re.findall(r"0x([0-9a-fA-F]{%d})\b" % (2 * dim), f.read())]
    assert len(words) == 512
    return np.array([[(w >> (8 * j)) & 255 for j in range(dim)] for w in words], dtype=np.int32)


IQ3S_GRID = _codebook("iq3s_grid.inc", 4)   # odd magnitudes 1..15
IQ2XS_GRID = _codebook("iq2xs_grid.inc", 8)  # 0x08, 0x19, 0x2b


def read_gguf_tensors(path):
    """{name: (type, ne, raw bytes)} from a GGUF v2/v3 file."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        nonlocal pos
        s = data[pos:pos + n].decode("utf-8", errors="replace")
        pos += n
        return s

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    assert take("I") == 0x46554747
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            align = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    start = (pos + align - 1) // align * align
    out = {}
    for name, ne, t, off in infos:
        _, bs, ts = TYPES[t]
        n = int(np.prod(ne))
        out[name] = (t, ne, data[start + off:start + off + n // bs * ts])
    return out


def _f16(b):
    return np.frombuffer(b.tobytes(), dtype="<f2").astype(F32)


def dequantize(t, raw):
    name, bs, ts = TYPES[t]
    if name == "f32":
        return np.frombuffer(raw, dtype="<f4")
    if name == "f16":
        return np.frombuffer(raw, dtype="<f2").astype(F32)
    if name == "bf16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(F32)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, ts)
    nb = b.shape[0]
    if name in ("q4_0", "iq4_nl"):
        d = _f16(b[:, 0:2])[:, None]
        qs = b[:, 2:18].astype(np.int32)
        q = np.concatenate([qs & 15, qs >> 4], axis=1)
        if name == "q4_0":
            return ((q - 8).astype(F32) * d).reshape(-1)
        return (d * IQ4NL[q]).reshape(-1)
    if name == "iq4_xs":  # {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
        d = _f16(b[:, 0:2])
        sh = b[:, 2].astype(np.int32) | (b[:, 3].astype(np.int32) << 8)
        y = np.zeros((nb, 256), dtype=F32)
        for ib in range(8):
            ls = ((b[:, 4 + ib // 2].astype(np.int32) >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
            dl = (d * (ls - 32).astype(F32)).astype(F32)[:, None]
            qs = b[:, 8 + 16 * ib:24 + 16 * ib].astype(np.int32)
            y[:, 32 * ib:32 * ib + 32] = dl * IQ4NL[np.concatenate([qs & 15, qs >> 4], axis=1)]
        return y.reshape(-1)
    if name == "iq3_s":  # {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}
        d = _f16(b[:, 0:2])
        y = np.zeros((nb, 256), dtype=F32)
        for ib in range(8):
            sc = (b[:, 106 + ib // 2].astype(np.int32) >> (4 * (ib % 2))) & 15
            db = (d * (1 + 2 * sc).astype(F32)).astype(F32)[:, None]
            for k in range(8):  # 4-tuple k of the group: 9-bit grid index
                g = b[:, 2 + 8 * ib + k].astype(np.int32) | (((b[:, 66 + ib].astype(np.int32) >> k) & 1) << 8)
                for j in range(4):
                    e = 32 * ib + 4 * k + j
                    neg = (b[:, 74 + e // 8].astype(np.int32) >> (e % 8)) & 1
                    v = np.where(neg == 1, -IQ3S_GRID[g, j], IQ3S_GRID[g, j]).astype(F32)
                    y[:, e] = db[:, 0] * v
        return y.reshape(-1)
    if name == "iq2_xs":  # {f16 d; u16 qs[32]; u8 scales[8]}
        d = _f16(b[:, 0:2])
        qs = b[:, 2:66].copy().view("<u2").astype(np.int32)  # [nb, 32]
        y = np.zeros((nb, 256), dtype=F32)
        for g in range(16):
            sc = (b[:, 66 + g // 2].astype(np.int32) >> (4 * (g % 2))) & 15
            db = ((d * (F32(0.5) + sc.astype(F32))).astype(F32) * F32(0.25)).astype(F32)
            for h in range(2):
                q = qs[:, 2 * g + h]
                signs = q >> 9
                bits = np.zeros_like(signs)
                for i in range(7):
                    bits += (signs >> i) & 1
                signs = signs | ((bits & 1) << 7)  # the eighth sign: an even count of negatives
                for j in range(8):
                    mag = IQ2XS_GRID[q & 511, j]
                    v = np.where((signs >> j) & 1 == 1, -mag, mag).astype(F32)
                    y[:, 16 * g + 8 * h + j] = db * v
        return y.reshape(-1)
    if name == "q4_1":
        d, m = _f16(b[:, 0:2])[:, None], _f16(b[:, 2:4])[:, None]
        qs = b[:, 4:20].astype(np.int32)
        q = np.concatenate([qs & 15, qs >> 4], axis=1)
        return (q.astype(F32) * d + m).reshape(-1)
    if name in ("q5_0", "q5_1"):
        off = 2 if name == "q5_0" else 4
        d = _f16(b[:, 0:2])[:, None]
        qh = b[:, off:off + 4].copy().view("<u4").astype(np.int64)  # [nb, 1]
        qs = b[:, off + 4:off + 20].astype(np.int64)
        j = np.arange(16)
        lo = (qs & 15) | (((qh >> j) & 1) << 4)
        hi = (qs >> 4) | (((qh >> (j + 16)) & 1) << 4)
        q = np.concatenate([lo, hi], axis=1)
        if name == "q5_0":
            return ((q - 16).astype(F32) * d).reshape(-1)
        return (q.astype(F32) * d + _f16(b[:, 2:4])[:, None]).reshape(-1)
    if name in ("q8_0", "w8a8"):  # W8A8: Q8_0 blocks with one scale per row
        d = _f16(b[:, 0:2])[:, None]
        return (b[:, 2:34].view(np.int8).astype(F32) * d).reshape(-1)
    y = np.zeros((nb, 256), dtype=F32)
    if name == "q2_K":
        sc, qs = b[:, 0:16].astype(np.int32), b[:, 16:80].astype(np.int32)
        d, dmin = _f16(b[:, 80:82])[:, None], _f16(b[:, 82:84])[:, None]
        for n in range(2):
            for k in range(4):
                for h in range(2):
                    s = sc[:, n * 8 + k * 2 + h][:, None]
                    q = (qs[:, n * 32 + 16 * h:n * 32 + 16 * h + 16] >> (2 * k)) & 3
                    o = n * 128 + k * 32 + h * 16
                    y[:, o:o + 16] = (d * (s & 15).astype(F32)) * q.astype(F32) - dmin * (s >> 4).astype(F32)
        return y.reshape(-1)
    if name == "q3_K":
        hm, qs, s = b[:, 0:32].astype(np.int32), b[:, 32:96].astype(np.int32), b[:, 96:108].astype(np.int32)
        d = _f16(b[:, 108:110])[:, None]
        scales = np.zeros((nb, 16), dtype=np.int32)
        for j in range(16):
            low = (s[:, j] & 15) if j < 8 else (s[:, j - 8] >> 4)
            high = (s[:, 8 + j % 4] >> (2 * (j // 4))) & 3
            scales[:, j] = (low | (high << 4)) - 32
        is_ = 0
        for n in range(2):
            for k in range(4):
                m = 1 << (n * 4 + k)
                for h in range(2):
                    idx = slice(16 * h, 16 * h + 16)
                    q = ((qs[:, n * 32 + 16 * h:n * 32 + 16 * h + 16] >> (2 * k)) & 3) - np.where(hm[:, idx] & m, 0, 4)
                    o = n * 128 + k * 32 + h * 16
                    y[:, o:o + 16] = (d * scales[:, is_][:, None].astype(F32)) * q.astype(F32)
                    is_ += 1
        return y.reshape(-1)
    if name in ("q4_K", "q5_K"):
        d, dmin = _f16(b[:, 0:2])[:, None], _f16(b[:, 2:4])[:, None]
        s = b[:, 4:16].astype(np.int32)

        def scale_min(j):
            if j < 4:
                return s[:, j] & 63, s[:, j + 4] & 63
            return (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4), (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
        if name == "q4_K":
            ql, qh = b[:, 16:144].astype(np.int32), None
        else:
            qh, ql = b[:, 16:48].astype(np.int32), b[:, 48:176].astype(np.int32)
        for g in range(4):
            q = ql[:, g * 32:(g + 1) * 32]
            for h in range(2):
                sc, mn = scale_min(2 * g + h)
                v = (q & 15) if h == 0 else (q >> 4)
                if qh is not None:
                    v = v + np.where(qh & (1 << (2 * g + h)), 16, 0)
                o = g * 64 + h * 32
                y[:, o:o + 32] = (d * sc[:, None].astype(F32)) * v.astype(F32) - dmin * mn[:, None].astype(F32)
        return y.reshape(-1)
    if name == "q6_K":
        ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
        sc = b[:, 192:208].view(np.int8).astype(np.int32)
        d = _f16(b[:, 208:210])[:, None]
        for n in range(2):
            L, H, S = ql[:, n * 64:(n + 1) * 64], qh[:, n * 32:(n + 1) * 32], sc[:, n * 8:(n + 1) * 8]
            for l in range(32):
                is_ = l // 16
                q1 = ((L[:, l] & 15) | (((H[:, l] >> 0) & 3) << 4)) - 32
                q2 = ((L[:, l + 32] & 15) | (((H[:, l] >> 2) & 3) << 4)) - 32
                q3 = ((L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4)) - 32
                q4 = ((L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)) - 32
                for k, q in enumerate((q1, q2, q3, q4)):
                    y[:, n * 128 + l + 32 * k] = (d[:, 0] * S[:, is_ + 2 * k].astype(F32)) * q.astype(F32)
        return y.reshape(-1)
    raise ValueError(name)


# GPTQ grids: symmetric types (nmax; Q8_0 its own), asymmetric (levels).
GPTQ_GRID = {"q4_0": ("sym", 8), "q5_0": ("sym", 16), "q8_0": ("q8", 128), "q4_1": ("asym", 15), "q5_1": ("asym", 31)}


def _f16_round(v):
    return float(np.float16(np.float32(v)))


def _gptq_params(kind, n, g):
    if kind == "asym":
        return _f16_round((g.max() - g.min()) / n), _f16_round(g.min())
    if kind == "q8":
        return _f16_round(np.abs(g).max() / 127), 0.0
    return _f16_round(g[np.argmax(np.abs(g))] / -n), 0.0


def _gptq_round(kind, n, d, m, v):
    if d == 0:
        return m if kind == "asym" else 0.0
    if kind == "asym":
        return np.clip(np.rint((v - m) / d), 0, n) * d + m
    lo, hi = (-128, 127) if kind == "q8" else (-n, n - 1)
    return np.clip(np.rint(v / d), lo, hi) * d


def gptq(w, x, qtype, group=32, act_order=False, damp=0.01, block=128):
    """GPTQ (Frantar et al.) as src/quant/gptq.h documents it, written from
    the paper's algorithm: w [rows, cols], calibration inputs x [tokens,
    cols] -> the dequantized weights [rows, cols] (float64)."""
    kind, n = GPTQ_GRID[qtype]
    W = w.astype(np.float64).copy()
    rows, cols = W.shape
    X = x.astype(np.float64)
    H = X.T @ X
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += damp * np.mean(np.diag(H)) * np.eye(cols)
    perm = np.argsort(-np.diag(H), kind="stable") if act_order else np.arange(cols)
    Hp = H[np.ix_(perm, perm)]
    U = np.linalg.cholesky(np.linalg.inv(Hp)).T  # upper: U^T U = H^-1
    params = {}
    if act_order:  # static groups from the original weights
        for r in range(rows):
            for g in range(cols // group):
                params[r, g] = _gptq_params(kind, n, W[r, g * group:(g + 1) * group])
    Wp = W[:, perm].copy()
    Q = np.zeros_like(W)
    for i1 in range(0, cols, block):
        i2 = min(cols, i1 + block)
        E = np.zeros((rows, i2 - i1))
        for k in range(i1, i2):
            c = perm[k]
            for r in range(rows):
                if not act_order and c % group == 0:
                    params[r, c // group] = _gptq_params(kind, n, Wp[r, k:k + group])
                d, m = params[r, c // group]
                q = _gptq_round(kind, n, d, m, Wp[r, k])
                Q[r, c] = q
                e = (Wp[r, k] - q) / U[k, k]
                E[r, k - i1] = e
                Wp[r, k + 1:i2] -= e * U[k, k + 1:i2]
        Wp[:, i2:] -= E @ U[i1:i2, i2:]
    return Q


def q4_0_roundtrip(w):
    """llama.cpp's reference Q4_0 rounding of rows w [rows, cols] (float32
    arithmetic as quantize_row_q4_0_ref), dequantized."""
    b = w.astype(F32).reshape(-1, 32)
    idx = np.argmax(np.abs(b), axis=1)
    mx = b[np.arange(len(b)), idx]
    d = (mx / F32(-8)).astype(F32)
    dh = d.astype(np.float16).astype(F32)
    idd = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    q = np.minimum(15, (b * idd[:, None] + F32(8.5)).astype(F32).astype(np.int8).astype(np.int32))
    return ((q - 8).astype(F32) * dh[:, None]).reshape(w.shape)


def awq_search(w, x, grid=20):
    """AWQ's scale search as src/quant/awq.h documents it, for one Q4_0 matrix:
    s = a^alpha / sqrt(max * min) with a_j = sqrt(sum_t x_tj^2), alpha in
    {0, 1/grid, ...}, minimizing sum over rows of dw H dw^T. -> (s, alpha,
    loss, loss at alpha 0)."""
    X = x.astype(np.float64)
    H = X.T @ X
    a = np.maximum(np.sqrt(np.maximum(np.diag(H), 0)), 1e-8)
    best = None
    for g in range(grid):
        alpha = g / grid
        raw = a ** alpha
        s = (raw / np.sqrt(raw.max() * raw.min())).astype(F32)
        back = q4_0_roundtrip(w.astype(F32) * s[None, :])
        dw = back.astype(np.float64) / s.astype(np.float64)[None, :] - w.astype(np.float64)
        loss = float(np.einsum("ri,ij,rj->", dw, H, dw))
        if g == 0:
            plain = loss
        if best is None or loss < best[2]:
            best = (s, alpha, loss)
    return best[0], best[1], best[2], plain


def smoothquant(w, x, alpha):
    """SmoothQuant's factors for W [rows, cols] reading x [tokens, cols], and
    the W8A8 rows of W diag(s) dequantized (infera's W8A8: one f16 scale per
    row, q = round half away from zero of x / d, clamped to +-127)."""
    a = np.abs(x).max(axis=0).astype(np.float64)
    wm = np.abs(w).max(axis=0).astype(np.float64)
    s = np.maximum(np.maximum(a, 1e-5) ** alpha / np.maximum(wm, 1e-5) ** (1 - alpha), 1e-5)
    s = np.where(a > 0, s, 1.0).astype(F32)
    ws = (w.astype(F32) * s[None, :]).astype(F32)
    amax = np.abs(ws).max(axis=1)
    d = (amax / F32(127)).astype(np.float16).astype(F32)
    inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    v = (ws * inv[:, None]).astype(F32)
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + F32(0.5)), -127, 127).astype(F32)
    return s, (q * d[:, None]).astype(F32)


def _codebook_fit(weight, xval, L):
    """sum w x q and sum w q^2 (q = 2l + 1), float32 in llama.cpp's order."""
    sqx, sq2 = F32(0), F32(0)
    for i in range(len(L)):
        q = F32(2 * L[i] + 1)
        sqx = F32(sqx + F32(F32(weight[i] * xval[i]) * q))
        sq2 = F32(sq2 + F32(F32(weight[i] * q) * q))
    return sqx, sq2


def _codebook_best(levels, candidates, xv, wv, scale):
    """Of the candidate points (rows of levels): the one nearest xv at scale,
    weighted by wv (the first on ties) -> (point, its levels)."""
    best, best_g = None, -1
    for g in candidates:
        d2 = F32(0)
        for i in range(levels.shape[1]):
            diff = F32(F32(scale * F32(2 * levels[g, i] + 1)) - xv[i])
            d2 = F32(d2 + F32(F32(wv[i] * diff) * diff))
        if best is None or d2 < best:
            best, best_g = d2, g
    return best_g, [int(v) for v in levels[best_g]]


def _codebook_search(levels, on, near, bits, max_level, mx, step, initially_on, resnap_all, weight, waux, xval):
    """llama.cpp's per-group scale search of the codebook quantizers, float32
    step by step: 19 trial scales (2 max_level - 1 + is * step) / mx, each
    tuple snapped to the codebook (off it: the best of its nearest points),
    the best weighted fit kept; then, if a tuple of the winner was off the
    codebook, the tuples (all, or only those off it) snapped again at the
    winning scale and the scale refitted. -> (scale, levels L)."""
    dim = levels.shape[1]
    n_tuples = len(xval) // dim

    def snap(xv, idv):
        return [max(0, min(max_level - 1, _nearest_int(F32(0.5) * F32(F32(idv * v) - F32(1))))) for v in xv]

    def code_of(ls):
        return sum(l << (bits * j) for j, l in enumerate(ls))

    def point(xv, wv, idv, scale):
        ls = snap(xv, idv)
        c = code_of(ls)
        if c in on:
            return on[c], True
        return _codebook_best(levels, near[c], xv, wv, scale)[0], False

    best, scale = F32(0), F32(mx / F32(2 * max_level - 1))
    L, on_grid = [0] * len(xval), [initially_on] * n_tuples
    for is_ in range(-9, 10):
        idv = F32(F32(F32(2 * max_level - 1) + F32(F32(is_) * F32(step))) / mx)
        this_scale = F32(F32(1) / idv)
        La, on_aux = [], []
        for k in range(n_tuples):
            g, hit = point(xval[dim * k:dim * k + dim], waux[dim * k:dim * k + dim], idv, this_scale)
            La += [int(v) for v in levels[g]]
            on_aux.append(hit)
        sqx, sq2 = _codebook_fit(weight, xval, La)
        if sq2 > 0 and F32(sqx * sqx) > F32(best * sq2):
            scale = F32(sqx / sq2)
            best = F32(scale * sqx)
            L, on_grid = La, on_aux
    if not all(on_grid) and scale > 0:
        idv = F32(F32(1) / scale)
        L = list(L)
        for k in range(n_tuples):
            if on_grid[k] and not resnap_all:
                continue
            g, _ = point(xval[dim * k:dim * k + dim], waux[dim * k:dim * k + dim], idv, scale)
            L[dim * k:dim * k + dim] = [int(v) for v in levels[g]]
        sqx, sq2 = _codebook_fit(weight, xval, L)
        if sq2 > 0:
            scale = F32(sqx / sq2)
    return scale, L


# --- IQ3_S quantization (llama.cpp's algorithm, float32 step by step) -------

def _iq3s_index():
    """code (4 x 3-bit levels) -> grid point, and for codes off the grid the
    grid points at the three smallest squared distances (ties by index)."""
    levels = (IQ3S_GRID - 1) // 2
    codes = levels[:, 0] | (levels[:, 1] << 3) | (levels[:, 2] << 6) | (levels[:, 3] << 9)
    on = {int(c): g for g, c in enumerate(codes)}
    near = {}
    for code in range(4096):
        if code in on:
            continue
        pos = np.array([2 * ((code >> (3 * j)) & 7) + 1 for j in range(4)])
        d2 = ((IQ3S_GRID - pos) ** 2).sum(axis=1)
        order = np.lexsort((np.arange(512), d2))
        keep = sorted(set(d2.tolist()))[:3]
        near[code] = [int(g) for g in order if d2[g] <= keep[-1]]
    return on, near


_IQ3S_INDEX = None


def _nearest_int(v):
    return int(np.rint(F32(v)))


def iq3s_quantize_block(x, qw=None):
    """x [256] float32, qw [256] or None -> the 110 bytes of one IQ3_S block
    (an all-zero 32-group keeps its own slot; see iq3s_quantize.cc)."""
    global _IQ3S_INDEX
    if _IQ3S_INDEX is None:
        _IQ3S_INDEX = _iq3s_index()
    on, near = _IQ3S_INDEX
    x = [F32(v) for v in x]
    out = bytearray(110)
    sumx2 = F32(0)
    for v in x:
        sumx2 = F32(sumx2 + F32(v * v))
    sigma2 = F32(F32(F32(2) * sumx2) / F32(256))
    scales = [F32(0)] * 8
    max_scale = F32(0)

    def code_of(l4):
        return l4[0] | (l4[1] << 3) | (l4[2] << 6) | (l4[3] << 9)

    levels = (IQ3S_GRID - 1) // 2

    for ib in range(8):
        xb = x[32 * ib:32 * ib + 32]
        if qw is not None:
            weight = [F32(F32(qw[32 * ib + i]) * np.sqrt(F32(sigma2 + F32(v * v)))) for i, v in enumerate(xb)]
        else:
            weight = [F32(v * v) for v in xb]
        waux = [np.sqrt(w) for w in weight]
        xval = [abs(v) for v in xb]
        signs = [sum(1 << i for i in range(8) if xb[8 * k + i] < 0) for k in range(4)]
        mx = max(xval)
        if mx == 0:
            continue
        scale, L = _codebook_search(levels, on, near, 3, 8, mx, 0.2, False, True, weight, waux, xval)
        for k in range(8):
            g = on[code_of(L[4 * k:4 * k + 4])]
            out[2 + 8 * ib + k] = g & 255
            out[66 + ib] |= (g >> 8) << k
        for k in range(4):
            out[74 + 4 * ib + k] = signs[k]
        scales[ib] = scale
        max_scale = max(max_scale, scale)
    if max_scale == 0:
        return bytes(out)
    d = F32(max_scale / F32(31))
    out[0:2] = np.array([F32(d * F32(1.033))], dtype="<f2").tobytes()
    idv = F32(F32(1) / d)
    for ib in range(0, 8, 2):
        l1 = max(0, min(15, _nearest_int(F32(0.5) * F32(F32(idv * scales[ib]) - F32(1)))))
        l2 = max(0, min(15, _nearest_int(F32(0.5) * F32(F32(idv * scales[ib + 1]) - F32(1)))))
        out[106 + ib // 2] = l1 | (l2 << 4)
    return bytes(out)


# --- IQ2_XS quantization (llama.cpp's algorithm, float32 step by step) ------

def _iq2xs_index():
    """code (8 x 2-bit levels 0..2) -> grid point, and for codes off the grid
    the grid points at the two smallest squared distances (ties by index)."""
    levels = np.select([IQ2XS_GRID == 8, IQ2XS_GRID == 25, IQ2XS_GRID == 43], [0, 1, 2], -1)
    assert (levels >= 0).all()
    codes = sum(levels[:, j] << (2 * j) for j in range(8))
    on = {int(c): g for g, c in enumerate(codes)}
    near = {}
    import itertools
    for ls in itertools.product(range(3), repeat=8):
        code = sum(l << (2 * j) for j, l in enumerate(ls))
        if code in on:
            continue
        d2 = (4 * (levels - np.array(ls)) ** 2).sum(axis=1)
        order = np.lexsort((np.arange(512), d2))
        keep = sorted(set(d2.tolist()))[:2]
        near[code] = [int(g) for g in order if d2[g] <= keep[-1]]
    return levels, on, near


_IQ2XS_INDEX = None


def iq2xs_quantize_block(x, qw=None):
    """x [256] float32, qw [256] or None (every column weighs 1) -> the 74
    bytes of one IQ2_XS block."""
    global _IQ2XS_INDEX
    if _IQ2XS_INDEX is None:
        _IQ2XS_INDEX = _iq2xs_index()
    levels, on, near = _IQ2XS_INDEX
    x = [F32(v) for v in x]
    sumx2 = F32(0)
    for v in x:
        sumx2 = F32(sumx2 + F32(v * v))
    sigma2 = F32(sumx2 / F32(256))
    q2 = [0] * 32
    scales = [F32(0)] * 16
    max_scale = F32(0)

    def code_of(l8):
        return sum(l << (2 * j) for j, l in enumerate(l8))

    for ib in range(16):
        xb = x[16 * ib:16 * ib + 16]
        weight = [F32(F32(1 if qw is None else qw[16 * ib + i]) * np.sqrt(F32(sigma2 + F32(v * v))))
                  for i, v in enumerate(xb)]
        waux = [np.sqrt(w) for w in weight]
        xval = [abs(v) for v in xb]
        signs = []
        for k in range(2):
            s = sum(1 << i for i in range(8) if xb[8 * k + i] < 0)
            if bin(s).count("1") % 2:
                ax = [F32(F32(weight[8 * k + i] * xb[8 * k + i]) * xb[8 * k + i]) for i in range(8)]
                imin = min(range(8), key=lambda i: (ax[i], i))
                xval[8 * k + imin] = -xval[8 * k + imin]
                s ^= 1 << imin
            signs.append(s & 127)
        mx = max(xval)
        if mx < F32(1e-15):
            continue
        scale, L = _codebook_search(levels, on, near, 2, 3, mx, 0.1, True, False, weight, waux, xval)
        for k in range(2):
            q2[2 * ib + k] = on[code_of(L[8 * k:8 * k + 8])] | (signs[k] << 9)
        scales[ib] = scale
        max_scale = max(max_scale, scale)
    out = bytearray(74)
    if max_scale == 0:
        return bytes(out)
    d = F32(max_scale / F32(31))
    out[0:2] = np.array([d], dtype="<f2").tobytes()
    idv = F32(F32(1) / d)
    for ib in range(16):
        lv = max(0, min(15, int(np.rint(F32(F32(0.5) * F32(F32(idv * scales[ib]) - F32(1)))))))
        out[66 + ib // 2] |= lv << (4 * (ib % 2))
    out[2:66] = np.array(q2, dtype="<u2").tobytes()
    return bytes(out)
