"""Writers for test model files, independent of infera's C++ code.

GGUF (v3) and safetensors are written from numpy arrays following the public
format specifications; HF-layout weights are permuted for GGUF the way
llama.cpp's converter does.
"""
import json
import struct

import numpy as np

GGUF_TYPES = {"u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9}
GGML_F32, GGML_F16, GGML_BF16, GGML_I8, GGML_I32 = 0, 1, 30, 24, 26
GGML_W8A8 = 201  # infera's type: Q8_0 blocks that all carry their row's one f16 scale
GGML_Q4_0S24 = 203  # infera's type: Q4_0 with 2:4 sparsity, the kept half stored (docs/pruning.md)


def _gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf_value(kind, v):
    if kind == "u32":
        return struct.pack("<I", v)
    if kind == "i32":
        return struct.pack("<i", v)
    if kind == "f32":
        return struct.pack("<f", v)
    if kind == "bool":
        return struct.pack("<B", 1 if v else 0)
    if kind == "str":
        return _gguf_str(v)
    raise ValueError(kind)


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, kind, value) with kind in u32/i32/f32/bool/str or
    ("arr", elem_kind); tensors: list of (name, ndarray, ggml_type)."""
    out = bytearray()
    out += struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kvs))
    for key, kind, value in kvs:
        out += _gguf_str(key)
        if isinstance(kind, tuple):
            out += struct.pack("<I", GGUF_TYPES["arr"])
            out += struct.pack("<IQ", GGUF_TYPES[kind[1]], len(value))
            for v in value:
                out += _gguf_value(kind[1], v)
        else:
            out += struct.pack("<I", GGUF_TYPES[kind]) + _gguf_value(kind, value)
    blobs, offset = [], 0
    for name, arr, gtype in tensors:
        if gtype == GGML_F32:
            data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif gtype == GGML_F16:
            data = np.ascontiguousarray(arr, dtype="<f2").tobytes()
        elif gtype == GGML_BF16:
            data = to_bf16_bits(arr).tobytes()
        elif gtype == GGML_I8:
            data = np.ascontiguousarray(arr, dtype=np.int8).tobytes()
        elif gtype == GGML_I32:
            data = np.ascontiguousarray(arr, dtype="<i4").tobytes()
        elif gtype == GGML_W8A8:
            data = w8a8_blocks(arr)
        elif gtype == GGML_Q4_0S24:
            data = q4_0_s24_blocks(arr)
        else:
            raise ValueError(gtype)
        out += _gguf_str(name)
        dims = list(reversed(arr.shape))  # ne[0] is the innermost dim
        out += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gtype, offset)
        blobs.append(data)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for data in blobs:
        out += data + b"\0" * ((-len(data)) % alignment)
    with open(path, "wb") as f:
        f.write(out)


def w8a8_blocks(w):
    """Rows of w [n_out, n_in] (n_in a multiple of 32) as W8A8 blocks: per row
    d = max|w| / 127 rounded to f16, codes round(w / d), every 32-block
    {f16 d, 32 x i8}."""
    w = np.asarray(w, dtype=np.float32)
    out = bytearray()
    for row in w.reshape(-1, w.shape[-1]):
        d = np.float16(np.abs(row).max() / 127)
        q = np.clip(np.rint(row / np.float32(d)), -127, 127).astype(np.int8) if d else np.zeros(row.size, np.int8)
        for b in range(0, row.size, 32):
            out += d.tobytes() + q[b:b + 32].tobytes()
    return bytes(out)


def q4_0_s24_blocks(w):
    """Rows of w [n_out, n_in] (n_in a multiple of 32) as Q4_0_S24 blocks
    {f16 d, u8 idx[4], u8 qs[8]}: per 32 d = max|w| / 8 (f16), and per 4-group
    the two largest |w| kept (p0 < p1 in idx's nibble g % 2 of byte g / 2 as
    p0 | p1 << 2), u = clip(round(w / d) + 8, 0, 15) as nibbles 2g, 2g + 1."""
    w = np.asarray(w, dtype=np.float32)
    out = bytearray()
    for blk in w.reshape(-1, 32):
        d = np.float16(np.abs(blk).max() / 8)
        u = np.clip(np.rint(blk / np.float32(d)) + 8, 0, 15).astype(np.uint8) if d else np.full(32, 8, np.uint8)
        idx, qs = bytearray(4), bytearray(8)
        for g in range(8):
            p0, p1 = sorted(np.argsort(-np.abs(blk[4 * g:4 * g + 4]), kind="stable")[:2])
            idx[g // 2] |= (int(p0) | int(p1) << 2) << (4 * (g % 2))
            qs[g] = int(u[4 * g + p0]) | int(u[4 * g + p1]) << 4
        out += d.tobytes() + bytes(idx) + bytes(qs)
    return bytes(out)


def to_bf16_bits(arr):
    """float -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(arr, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: dict name -> ndarray (HF shape)."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        if dtype == "F32":
            data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif dtype == "F16":
            data = np.ascontiguousarray(arr, dtype="<f2").tobytes()
        else:
            data = to_bf16_bits(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def permute_for_gguf(w, n_head):
    """llama.cpp's convert permutation: HF 'halves' rotary rows -> pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_safetensors(path):
    """name -> float64 ndarray (HF shape), for F32/F16/BF16 tensors."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif e["dtype"] == "BF16":
            a = from_bf16_bits(np.frombuffer(raw, dtype="<u2"))
        else:
            raise ValueError(e["dtype"])
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out
