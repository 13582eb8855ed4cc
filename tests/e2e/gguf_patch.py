"""Adds integer metadata to a copy of a GGUF file (v2/v3), everything else
byte for byte: tests use it for keys a model file lacks (e.g. the FIM token
ids of a code model). Reads the header just far enough to find where the
key-value pairs end and the tensor data starts."""
import struct

_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar types


def _skip_value(buf, pos, vtype):
    if vtype == 8:  # string
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == 9:  # array: element type, count, elements
        etype, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _SIZES:
            return pos + n * _SIZES[etype]
        for _ in range(n):
            pos = _skip_value(buf, pos, etype)
        return pos
    return pos + _SIZES[vtype]


def _string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def with_int_metadata(src, dst, values):
    """Writes `src` to `dst` with the u32 keys `values` ({key: int}) added."""
    with open(src, "rb") as f:
        buf = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and version in (2, 3), (magic, version)
    pos = 24
    alignment = 32
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, pos)
        pos = _skip_value(buf, pos, vtype)
    kv_end = pos
    for _ in range(n_tensors):  # name, n_dims, dims, type, offset
        (nlen,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    data_start = (pos + alignment - 1) // alignment * alignment
    added = b"".join(_string(k) + struct.pack("<II", 4, v) for k, v in values.items())
    head = struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + len(values)) + buf[24:kv_end] + added
    head += buf[kv_end:pos]
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(buf[data_start:])
