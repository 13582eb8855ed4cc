"""`infera quantize --pure` writes exactly the bytes llama.cpp's llama-quantize
wrote for the same F32 model (tinystories-3m in ../shared), for every block
type infera can write; the default rule keeps the output tensor at Q8_0."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_reference as qr  # noqa: E402

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
TS3M = os.path.join(SHARED, "models", "tinystories-3m")


@unittest.skipUnless(os.path.exists(TS3M), "../shared not present")
class QuantizeTest(unittest.TestCase):
    def test_byte_identical_to_llama_cpp(self):
        with tempfile.TemporaryDirectory() as d:
            cases = [(t, t, True) for t in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                                            "q6_k", "iq4_nl")]
            # llama-quantize's default Q4_K_M mixture (Q6_K for the output tensor
            # and for attn_v / ffn_down of the layers use_more_bits picks).
            cases.append(("q4_k_m", "q4_k_m-mix", False))
            for t, ref, pure in cases:
                out = os.path.join(d, t + ".gguf")
                r = subprocess.run([INFERA, "quantize", os.path.join(TS3M, "tinystories-3m-f32.gguf"), out, "--type", t]
                                   + (["--pure"] if pure else []), capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("bits per weight", r.stderr)
                ours = qr.read_gguf_tensors(out)
                theirs = qr.read_gguf_tensors(os.path.join(TS3M, f"tinystories-3m-{ref}.gguf"))
                self.assertEqual(sorted(ours), sorted(theirs))
                for name, (typ, ne, raw) in theirs.items():
                    self.assertEqual((ours[name][0], ours[name][1]), (typ, ne), name)
                    self.assertEqual(ours[name][2], raw, f"{t} {name}: bytes differ")

    def test_iq4_xs(self):
        """IQ4_XS (no llama.cpp file of it in ../shared): written, read back by
        the numpy block reader exactly as infera dequantizes it, and as close
        to F32 as Q4_K."""
        import numpy as np
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "xs.gguf")
            r = subprocess.run([INFERA, "quantize", os.path.join(TS3M, "tinystories-3m-f32.gguf"), out, "--type",
                                "iq4_xs", "--pure"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            t = qr.read_gguf_tensors(out)
            typ, ne, raw = t["blk.0.ffn_down.weight"]
            self.assertEqual(qr.TYPES[typ][0], "iq4_xs")
            dump = os.path.join(d, "t.f32")
            subprocess.run([INFERA, "dump-tensor", "-m", out, "--tensor", "blk.0.ffn_down.weight", "--out", dump],
                           check=True, capture_output=True)
            np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4"), qr.dequantize(typ, raw))
            ppl = {}
            for name, model in (("xs", out), ("q4_k", os.path.join(TS3M, "tinystories-3m-q4_k.gguf")),
                                ("f32", os.path.join(TS3M, "tinystories-3m-f32.gguf"))):
                r = subprocess.run([INFERA, "perplexity", "-m", model, "-f", os.path.join(TS3M, "heldout.txt"), "--ctx",
                                    "128", "--chunks", "20", "--json"], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                import json
                ppl[name] = json.loads(r.stdout)["ppl"]
            self.assertLess(ppl["xs"] / ppl["f32"], 1.02, ppl)
            self.assertLess(abs(ppl["xs"] - ppl["q4_k"]) / ppl["q4_k"], 0.01, ppl)

    def test_output_rule_and_keep(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "mix.gguf")
            r = subprocess.run([INFERA, "quantize", os.path.join(TS3M, "tinystories-3m-f32.gguf"), out, "--type", "q4_0",
                                "--keep", "blk.0.*=f16"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            t = qr.read_gguf_tensors(out)
            self.assertEqual(qr.TYPES[t["output.weight"][0]][0], "q6_K")
            self.assertEqual(qr.TYPES[t["blk.0.attn_q.weight"][0]][0], "f16")
            self.assertEqual(qr.TYPES[t["blk.1.attn_q.weight"][0]][0], "q4_0")
            r = subprocess.run([INFERA, "quantize", os.path.join(TS3M, "tinystories-3m-f32.gguf"), out, "--type", "q9_9"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)

    def test_llama_quantize_command_line(self):
        """llama-quantize's spellings: IN OUT TYPE [THREADS] writes the same
        bytes as --type; --leave-output-tensor, --output-tensor-type and
        --token-embedding-type set those tensors' types; conflicts are one
        error line, exit 2, nothing written."""
        src = os.path.join(TS3M, "tinystories-3m-f32.gguf")

        def quantize(out, *args):
            r = subprocess.run([INFERA, "quantize", src, out, *args], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            return qr.read_gguf_tensors(out), r.stderr

        with tempfile.TemporaryDirectory() as d:
            flag, _ = quantize(os.path.join(d, "flag.gguf"), "--type", "q4_k_m")
            for args in (["Q4_K_M"], ["q4_k_m", "2"]):
                positional, _ = quantize(os.path.join(d, "pos.gguf"), *args)
                self.assertEqual(positional, flag, args)
            t, _ = quantize(os.path.join(d, "leave.gguf"), "q4_0", "--leave-output-tensor")
            self.assertEqual(qr.TYPES[t["output.weight"][0]][0], "f32")
            self.assertEqual(qr.TYPES[t["blk.0.attn_q.weight"][0]][0], "q4_0")
            t, _ = quantize(os.path.join(d, "types.gguf"), "q4_0", "--output-tensor-type", "q8_0",
                            "--token-embedding-type", "f16")
            self.assertEqual(qr.TYPES[t["output.weight"][0]][0], "q8_0")
            self.assertEqual(qr.TYPES[t["token_embd.weight"][0]][0], "f16")
            # A quantized input is requantized (llama-quantize asks for --allow-requantize).
            r = subprocess.run([INFERA, "quantize", "--allow-requantize", os.path.join(d, "flag.gguf"),
                                os.path.join(d, "re.gguf"), "q8_0"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("ignoring --allow-requantize", r.stderr)
            self.assertEqual(qr.TYPES[qr.read_gguf_tensors(os.path.join(d, "re.gguf"))["blk.0.attn_q.weight"][0]][0],
                             "q8_0")
            out = os.path.join(d, "never.gguf")
            for args, needle in ((["q4_0", "--type", "q8_0"], "given twice"), (["q4_0", "two"], "thread count"),
                                 (["q4_0", "2", "-t", "2"], "threads are given twice"), ([], "no type"),
                                 (["q4_0", "--leave-output-tensor", "--output-tensor-type", "q8_0"], "give one"),
                                 (["q4_0", "--output-tensor-type", "zz"], "cannot write type 'zz'")):
                r = subprocess.run([INFERA, "quantize", src, out, *args], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, (args, lines))
                self.assertIn(needle, lines[0], args)
                self.assertFalse(os.path.exists(out), args)

    def test_non_finite_weights_are_refused(self):
        """A NaN weight: one clear line, exit 2, nothing written, for the
        plain types and for the codebook searches (which used to abort)."""
        import struct
        src = os.path.join(TS3M, "tinystories-3m-f32.gguf")
        with tempfile.TemporaryDirectory() as d:
            raw = qr.read_gguf_tensors(src)["blk.0.ffn_down.weight"][2]
            with open(src, "rb") as f:
                data = bytearray(f.read())
            off = data.find(raw)
            data[off + 40:off + 44] = struct.pack("<f", float("nan"))
            bad = os.path.join(d, "nan.gguf")
            with open(bad, "wb") as f:
                f.write(data)
            for t in ("q4_0", "q4_k", "iq3_s"):
                out = os.path.join(d, t + ".gguf")
                r = subprocess.run([INFERA, "quantize", bad, out, "--type", t], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, r.stderr)
                errors = [l for l in r.stderr.splitlines() if "error" in l]  # (progress lines come first)
                self.assertEqual(len(errors), 1, r.stderr)
                self.assertIn("blk.0.ffn_down.weight: row 0 holds a NaN", errors[0])
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
