"""infera's dequantization of every block type is bit-identical to the
independent numpy implementation (quant_reference.py), on the tensors of
the llama.cpp-quantized tinystories-3m files in ../shared."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_reference as qr  # noqa: E402

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
TS3M = os.path.join(SHARED, "models", "tinystories-3m")


@unittest.skipUnless(os.path.exists(TS3M), "../shared not present")
class DequantTest(unittest.TestCase):
    def test_every_type_bit_exact(self):
        seen = set()
        with tempfile.TemporaryDirectory() as d:
            for f in sorted(os.listdir(TS3M)):
                if not f.endswith(".gguf"):
                    continue
                tensors = qr.read_gguf_tensors(os.path.join(TS3M, f))
                for name in ("blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight", "output.weight"):
                    if name not in tensors:
                        continue
                    t, ne, raw = tensors[name]
                    out = os.path.join(d, "t.f32")
                    subprocess.run([INFERA, "dump-tensor", "--model", os.path.join(TS3M, f), "--tensor", name, "--out", out],
                                   check=True, capture_output=True)
                    got = np.fromfile(out, dtype=np.float32)
                    want = qr.dequantize(t, raw)
                    self.assertEqual(got.shape, want.shape, (f, name))
                    diff = np.flatnonzero(got.view(np.uint32) != want.astype(np.float32).view(np.uint32))
                    self.assertEqual(len(diff), 0, f"{f} {name} ({qr.TYPES[t][0]}): {len(diff)} values differ, "
                                                   f"first at {diff[:3]}: {got[diff[:3]]} vs {want[diff[:3]]}")
                    seen.add(qr.TYPES[t][0])
        for t in ("f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl"):
            self.assertIn(t, seen)


if __name__ == "__main__":
    unittest.main()
