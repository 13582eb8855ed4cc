"""The codebook i-quants (IQ3_S, IQ2_XS) against the independent numpy
implementation in quant_reference.py: src/quant's blocks (plain and
importance-weighted, rows with all-zero groups included) are byte-identical
to the numpy quantizers', infera dequantizes them exactly as the numpy block
reader does, and quantized models are as good as the K-quant of about the
same size."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_reference as qr  # noqa: E402
from test_gptq import INFERA, STORIES, TS3M, correlated, harness_rtn  # noqa: E402

IQ3_S, IQ2_XS = 21, 17


def perplexity(model):
    r = subprocess.run([INFERA, "perplexity", "-m", model, "-f", os.path.join(TS3M, "heldout.txt"), "--ctx", "128",
                        "--chunks", "20", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ppl"]


def importance(x):
    sum2 = (x.astype(np.float64) ** 2).sum(axis=0)
    return (sum2 / sum2.mean()).astype(np.float32)


class IQuantsTest(unittest.TestCase):
    def check_blocks(self, qtype, w, x):
        ggml, size, quantize = {"iq3_s": (IQ3_S, 110, qr.iq3s_quantize_block),
                                "iq2_xs": (IQ2_XS, 74, qr.iq2xs_quantize_block)}[qtype]
        deq, blocks = harness_rtn(qtype, w, x)
        qw = importance(x) if x.shape[0] > 0 else None
        cols = w.shape[1]
        want = b"".join(quantize(w[r, b:b + 256], None if qw is None else qw[b:b + 256])
                        for r in range(w.shape[0]) for b in range(0, cols, 256))
        self.assertEqual(len(blocks), len(want))
        for i in range(0, len(want), size):
            self.assertEqual(blocks[i:i + size], want[i:i + size], f"{qtype} block {i // size}")
        np.testing.assert_array_equal(deq.reshape(-1), qr.dequantize(ggml, blocks))
        return deq

    def test_blocks_match_numpy(self):
        w, x = correlated(21, 4, 512, 64)
        w *= 0.02
        w[1, 32:64] = 0  # an all-zero group
        w[2, :] = 0      # an all-zero row
        for qtype in ("iq3_s", "iq2_xs"):
            deq = self.check_blocks(qtype, w, np.zeros((0, 512), dtype=np.float32))  # plain
            self.assertEqual(np.abs(deq[2]).max(), 0)
            self.check_blocks(qtype, w, x)  # importance-weighted

    def check_dump(self, d, out, tensors, qtype):
        """blk.0.ffn_down.weight is qtype, and infera dequantizes it exactly as
        the numpy block reader does."""
        typ, _, raw = tensors["blk.0.ffn_down.weight"]
        self.assertEqual(qr.TYPES[typ][0], qtype)
        dump = os.path.join(d, "t.f32")
        subprocess.run([INFERA, "dump-tensor", "-m", out, "--tensor", "blk.0.ffn_down.weight", "--out", dump],
                       check=True, capture_output=True)
        np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), qr.dequantize(typ, raw))

    def test_iq2_xs_model(self):
        with tempfile.TemporaryDirectory() as d:
            im, out = os.path.join(d, "im.gguf"), os.path.join(d, "iq2xs.gguf")
            f32 = os.path.join(TS3M, "tinystories-3m-f32.gguf")
            r = subprocess.run([INFERA, "quantize", f32, out, "--type", "iq2_xs"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)  # an importance matrix is required
            self.assertIn("--imatrix", r.stderr)
            self.assertFalse(os.path.exists(out))
            subprocess.run([INFERA, "imatrix", "-m", f32, "-f", STORIES, "--chunks", "60", "--ctx", "128", "-o", im],
                           check=True, capture_output=True)
            r = subprocess.run([INFERA, "quantize", f32, out, "--type", "iq2_xs", "--imatrix", im],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            t = qr.read_gguf_tensors(out)
            # llama.cpp's rules for the type: Q5_K output, Q2_K embeddings and attn_v.
            self.assertEqual(qr.TYPES[t["output.weight"][0]][0], "q5_K")
            self.assertEqual(qr.TYPES[t["token_embd.weight"][0]][0], "q2_K")
            self.assertEqual(qr.TYPES[t["blk.0.attn_v.weight"][0]][0], "q2_K")
            self.check_dump(d, out, t, "iq2_xs")
            ppl = {n: perplexity(m) for n, m in (("iq2_xs", out),
                                                  ("q2_k", os.path.join(TS3M, "tinystories-3m-q2_k.gguf")))}
            # 6.219 vs (pure) Q2_K's 6.544 when written, at 2.48 vs 2.63 bits per weight.
            self.assertLess(ppl["iq2_xs"], ppl["q2_k"], ppl)

    def test_model(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "iq3s.gguf")
            r = subprocess.run([INFERA, "quantize", os.path.join(TS3M, "tinystories-3m-f32.gguf"), out, "--type",
                                "iq3_s", "--pure"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.check_dump(d, out, qr.read_gguf_tensors(out), "iq3_s")
            ppl = {n: perplexity(m) for n, m in (("iq3_s", out), ("q3_k", os.path.join(TS3M, "tinystories-3m-q3_k.gguf")),
                                                  ("f32", os.path.join(TS3M, "tinystories-3m-f32.gguf")))}
            # Every tensor IQ3_S (--pure): 6.000 vs pure Q3_K's 5.970 and F32's
            # 5.858 when written (5.936 with the output tensor in Q6_K).
            self.assertLess(ppl["iq3_s"], 1.01 * ppl["q3_k"], ppl)
            self.assertLess(ppl["iq3_s"] / ppl["f32"], 1.03, ppl)


if __name__ == "__main__":
    unittest.main()
