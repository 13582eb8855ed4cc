"""A llama-family GGUF as a PyTorch module (tooling: distillation of pruned
models), read straight from the file in GGUF's own layout: Q/K rows in
llama.cpp's pairwise rotary order, per-layer head counts and FFN widths
taken from the tensor shapes (structurally pruned models), F32/F16/BF16
weights. write_patched() writes trained values back into a copy of the file,
keeping its metadata (tokenizer, pruning keys) and tensor types."""
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

F32, F16, BF16 = 0, 1, 30
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}


class GgufError(Exception):
    pass


def read_gguf(path):
    """(metadata {key: value}, tensors {name: (type, shape, absolute offset, nbytes)})."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8", errors="replace")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(_SCALARS[t])

    try:
        if take("I") != 0x46554747:
            raise GgufError(f"{path}: not a GGUF file")
        take("I")
        n_tensors, n_kv = take("Q"), take("Q")
        meta = {}
        for _ in range(n_kv):
            key = string()
            meta[key] = value(take("I"))
        infos = []
        for _ in range(n_tensors):
            name = string()
            ne = [take("Q") for _ in range(take("I"))]
            infos.append((name, take("I"), ne, take("Q")))
    except struct.error as e:
        raise GgufError(f"{path}: truncated GGUF header") from e
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, typ, ne, off in infos:
        n = int(np.prod(ne))
        size = {F32: 4 * n, F16: 2 * n, BF16: 2 * n}.get(typ)
        tensors[name] = (typ, list(reversed(ne)), base + off, size)
    return meta, tensors


def load_array(path, info):
    typ, shape, off, size = info
    if size is None:
        raise GgufError(f"{path}: tensor type {typ} is quantized; prune with --outtype f32 or f16 to distill")
    with open(path, "rb") as f:
        f.seek(off)
        raw = f.read(size)
    if typ == F32:
        a = np.frombuffer(raw, dtype="<f4")
    elif typ == F16:
        a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    else:
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    return a.reshape(shape).copy()


def write_patched(src, dst, arrays):
    """Copy of src with the data of the named tensors replaced (same shapes,
    stored in each tensor's own type); written to a temporary file, renamed."""
    _, tensors = read_gguf(src)
    with open(src, "rb") as f:
        data = bytearray(f.read())
    for name, arr in arrays.items():
        typ, shape, off, size = tensors[name]
        arr = np.asarray(arr, dtype=np.float32).reshape(shape)
        if typ == F32:
            raw = arr.astype("<f4").tobytes()
        elif typ == F16:
            raw = arr.astype("<f2").tobytes()
        elif typ == BF16:
            bits = arr.view(np.uint32)
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            raise GgufError(f"{name}: cannot write tensor type {typ}")
        assert len(raw) == size
        data[off:off + size] = raw
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dst)


def _per_layer(v, n_layer):
    return list(v) if isinstance(v, list) else [v] * n_layer


class GgufLlama(nn.Module):
    """Llama / Mistral-shaped decoder (RMSNorm, SwiGLU, GQA, rotary pairs)."""

    MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

    def __init__(self, path):
        super().__init__()
        meta, tensors = read_gguf(path)
        arch = meta.get("general.architecture")
        if arch not in ("llama", "mistral"):
            raise GgufError(f"{path}: architecture {arch!r}; distillation supports llama and mistral")
        a = arch + "."
        self.path = path
        self.n_layer = meta[a + "block_count"]
        self.n_embd = meta[a + "embedding_length"]
        heads = _per_layer(meta[a + "attention.head_count"], self.n_layer)
        self.eps = meta.get(a + "attention.layer_norm_rms_epsilon", 1e-5)
        self.theta = meta.get(a + "rope.freq_base", 10000.0)
        self.head_dim = meta.get(a + "attention.key_length", self.n_embd // max(heads))
        self.names = []
        self.params = nn.ParameterDict()
        for name in tensors:
            if name.startswith("rope_freqs"):
                raise GgufError(f"{path}: llama3 rope scaling is not supported by the distillation tool")
            self.params[name.replace(".", "__")] = nn.Parameter(torch.from_numpy(load_array(path, tensors[name])))
            self.names.append(name)
        if "output.weight" not in tensors:
            raise GgufError(f"{path}: tied embeddings are not supported by the distillation tool")

    def p(self, name):
        return self.params[name.replace(".", "__")]

    def layer_matrices(self):
        """(GGUF name, parameter) of every layer matrix."""
        return [(f"blk.{i}.{m}.weight", self.p(f"blk.{i}.{m}.weight"))
                for i in range(self.n_layer) for m in self.MATRICES]

    def rope(self, x, pos):
        # x [B, H, T, hd]; pairs (2i, 2i+1) rotate by pos * theta^(-2i/hd).
        hd = x.shape[-1]
        inv = self.theta ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
        ang = pos[:, None].float() * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def forward(self, tokens):
        B, T = tokens.shape
        hd = self.head_dim
        pos = torch.arange(T, device=tokens.device)
        x = F.embedding(tokens, self.p("token_embd.weight"))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), diagonal=1)
        for i in range(self.n_layer):
            b = f"blk.{i}."
            h = self.norm(x, self.p(b + "attn_norm.weight"))
            q = h @ self.p(b + "attn_q.weight").T
            k = h @ self.p(b + "attn_k.weight").T
            v = h @ self.p(b + "attn_v.weight").T
            nh, nkv = q.shape[-1] // hd, k.shape[-1] // hd
            q = self.rope(q.view(B, T, nh, hd).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, nkv, hd).transpose(1, 2), pos)
            v = v.view(B, T, nkv, hd).transpose(1, 2)
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            s = (q @ k.transpose(-2, -1)) / hd ** 0.5
            att = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
            x = x + att.transpose(1, 2).reshape(B, T, nh * hd) @ self.p(b + "attn_output.weight").T
            h = self.norm(x, self.p(b + "ffn_norm.weight"))
            g = F.silu(h @ self.p(b + "ffn_gate.weight").T) * (h @ self.p(b + "ffn_up.weight").T)
            x = x + g @ self.p(b + "ffn_down.weight").T
        return self.norm(x, self.p("output_norm.weight")) @ self.p("output.weight").T
