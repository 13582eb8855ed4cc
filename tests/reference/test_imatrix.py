"""`infera imatrix` against an independent numpy computation (the reference
forward pass shown every layer weight's input), both of llama.cpp's imatrix
formats, `infera quantize --imatrix` (same bytes from either format, lower KL
divergence than plain rounding), and bad input refused with exit 2 and
nothing written."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_reference as qr  # noqa: E402
import reference as ref  # noqa: E402
import test_reference as tr  # noqa: E402

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
TS3M = os.path.join(SHARED, "models", "tinystories-3m")
LLAMA2_SPM = os.path.join(SHARED, "data", "tokenizers", "llama2", "tokenizer.model")
STORIES = os.path.join(SHARED, "data", "eval", "tinystories", "tinystories_197k.txt")
# Under the sanitizers (INFERA_SANITIZED=1, the ASan tree's ctest) the same
# commands calibrate on less text: 56 chunks of 128 tokens instead of 231, and
# 256 tokens per target-bpw sensitivity pass instead of 512. The assertions
# hold at both sizes (checked with the release build); the margins are the
# release run's to show.
SANITIZED = os.environ.get("INFERA_SANITIZED") == "1"
CALIB_CHARS = 15000 if SANITIZED else 60000
BPW_CALIB_TOKENS = "256" if SANITIZED else "512"

# HF weight name -> GGUF name (the imatrix is keyed by GGUF names).
GGUF_NAME = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}


def gguf_name(hf):
    parts = hf.split(".")  # model.layers.L.<module>.<proj>.weight
    return f"blk.{parts[2]}.{GGUF_NAME[parts[3] + '.' + parts[4]]}.weight"


def run(*args):
    return subprocess.run([INFERA, "--log-level", "warn", *args], capture_output=True, text=True)


def read_legacy(path):
    """{name: (ncall, values)} of a legacy .dat imatrix."""
    with open(path, "rb") as f:
        b = f.read()
    (n,), at, out = struct.unpack_from("<i", b, 0), 4, {}
    for _ in range(n):
        (ln,) = struct.unpack_from("<i", b, at)
        name = b[at + 4:at + 4 + ln].decode()
        at += 4 + ln
        ncall, nval = struct.unpack_from("<ii", b, at)
        out[name] = (ncall, np.frombuffer(b, dtype=np.float32, count=nval, offset=at + 8))
        at += 8 + 4 * nval
    return out


def kld(model, base, text):
    import json
    r = run("perplexity", "-m", model, "-f", text, "-c", "128", "--chunks", "24", "--kl-divergence-base", base,
            "--kl-divergence", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["kld"]


@unittest.skipUnless(os.path.exists(LLAMA2_SPM) and os.path.exists(STORIES), "../shared not present")
class ImatrixValuesTest(unittest.TestCase):
    def test_sums_of_squares_match_numpy(self):
        cfg, W = tr.make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2, vocab_size=32000), 7)
        ctx = 48
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(d, "model")
            tr.write_hf(folder, cfg, W)
            shutil.copy(LLAMA2_SPM, os.path.join(folder, "tokenizer.model"))
            calib = os.path.join(d, "calib.txt")
            with open(STORIES, encoding="utf-8") as f:
                text = f.read(1500)
            with open(calib, "w", encoding="utf-8") as f:
                f.write(text)
            for out in ("im.gguf", "im.dat"):
                r = run("imatrix", "-m", folder, "-f", calib, "--ctx", str(ctx), "-o", os.path.join(d, out))
                self.assertEqual(r.returncode, 0, r.stderr)
            r = run("tokenize", "-m", folder, "--file", calib, "--add-special")
            self.assertEqual(r.returncode, 0, r.stderr)
            tokens = [int(t) for t in r.stdout.split()]
            self.assertEqual(tokens[0], 1)
            # As llama-imatrix cuts them: whole chunks of ctx tokens of the text
            # tokenized with BOS, each chunk's first token replaced by BOS (1).
            chunks = [[1] + tokens[i + 1:i + ctx] for i in range(0, len(tokens) - ctx + 1, ctx)]
            self.assertGreaterEqual(len(chunks), 3)
            sums, counts = {}, {}

            def capture(name, x):
                g = gguf_name(name)
                sums[g] = sums.get(g, 0) + (np.asarray(x, dtype=np.float64) ** 2).sum(axis=0)
                counts[g] = counts.get(g, 0) + x.shape[0]

            for c in chunks:
                ref.forward(cfg, W, c, capture=capture)

            got = qr.read_gguf_tensors(os.path.join(d, "im.gguf"))
            self.assertEqual(sorted(n[:-len(".in_sum2")] for n in got if n.endswith(".in_sum2")), sorted(sums))
            for name, want in sums.items():
                _, ne, raw = got[name + ".in_sum2"]
                have = np.frombuffer(raw, dtype=np.float32).astype(np.float64)
                self.assertEqual(list(ne), [want.size, 1], name)
                rel = np.max(np.abs(have - want) / np.maximum(np.abs(want), 1e-30))
                self.assertLess(rel, 1e-5, name)
                (count,) = np.frombuffer(got[name + ".counts"][2], dtype=np.float32)
                self.assertEqual(count, counts[name], name)
            legacy = read_legacy(os.path.join(d, "im.dat"))
            self.assertEqual(sorted(legacy), sorted(sums))
            for name, (ncall, vals) in legacy.items():
                self.assertEqual(ncall, len(chunks))  # ceil(tokens / ctx)
                mean = sums[name] / counts[name]
                self.assertLess(np.max(np.abs(vals / ncall - mean) / mean), 1e-5, name)


@unittest.skipUnless(os.path.exists(TS3M) and os.path.exists(STORIES), "../shared not present")
class QuantizeWithImatrixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        d = cls.dir.name
        cls.f32 = os.path.join(TS3M, "tinystories-3m-f32.gguf")
        cls.calib = os.path.join(d, "calib.txt")
        with open(STORIES, encoding="utf-8") as f:
            text = f.read(CALIB_CHARS)
        with open(cls.calib, "w", encoding="utf-8") as f:
            f.write(text)
        for out in ("im.gguf", "im.dat"):
            r = run("imatrix", "-m", cls.f32, "-f", cls.calib, "--ctx", "128", "-o", os.path.join(d, out))
            assert r.returncode == 0, r.stderr
        cls.base = os.path.join(d, "base.kld")
        r = run("perplexity", "-m", cls.f32, "-f", os.path.join(TS3M, "heldout.txt"), "-c", "128", "--chunks", "24",
                "--kl-divergence-base", cls.base)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def quantize(self, t, imatrix=None):
        out = os.path.join(self.dir.name, f"{t}-{os.path.basename(imatrix) if imatrix else 'rtn'}.gguf")
        r = run("quantize", self.f32, out, "--type", t, "--pure", *(["--imatrix", imatrix] if imatrix else []))
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def test_both_formats_give_the_same_bytes_and_lower_kld(self):
        d = self.dir.name
        for t in ("q2_k", "q4_0", "q4_k"):
            rtn = self.quantize(t)
            a = self.quantize(t, os.path.join(d, "im.gguf"))
            b = self.quantize(t, os.path.join(d, "im.dat"))
            ta, tb, tr_ = qr.read_gguf_tensors(a), qr.read_gguf_tensors(b), qr.read_gguf_tensors(rtn)
            self.assertEqual(ta, tb, t)
            # Layer weights change; the output and embeddings (not in the imatrix) do not.
            self.assertNotEqual(ta["blk.0.attn_q.weight"][2], tr_["blk.0.attn_q.weight"][2], t)
            self.assertEqual(ta["output.weight"][2], tr_["output.weight"][2], t)
            with open(a, "rb") as f:
                self.assertIn(b"quantize.imatrix.file", f.read(1 << 16))
            heldout = os.path.join(TS3M, "heldout.txt")
            self.assertLess(kld(a, self.base, heldout), kld(rtn, self.base, heldout), t)

    def test_target_bpw_beats_a_uniform_type_of_the_same_size(self):
        d = self.dir.name
        mix = os.path.join(d, "mix.gguf")
        r = run("quantize", self.f32, mix, "--type", "q4_k", "--target-bpw", "4.5", "--calib", self.calib,
                "--calib-tokens", BPW_CALIB_TOKENS, "--imatrix", os.path.join(d, "im.gguf"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("target-bpw plan", r.stderr)
        # Every candidate's pass started at its tensor's block from the kept stream.
        self.assertIn("kept the residual stream", r.stderr)
        self.assertNotIn("warning", r.stderr)
        uniform = os.path.join(d, "uniform.gguf")
        r = run("quantize", self.f32, uniform, "--type", "q4_k", "--imatrix", os.path.join(d, "im.gguf"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLessEqual(os.path.getsize(mix), os.path.getsize(uniform) * 1.01)
        types = {qr.TYPES[t][0] for t, _, _ in qr.read_gguf_tensors(mix).values()}
        self.assertGreater(len(types - {"f32"}), 2, types)  # a real mixture
        heldout = os.path.join(TS3M, "heldout.txt")
        self.assertLess(kld(mix, self.base, heldout), kld(uniform, self.base, heldout))
        never = os.path.join(d, "never.gguf")
        for args in (["--target-bpw", "2.2", "--calib", self.calib, "--calib-tokens", "256"],
                     ["--target-bpw", "4.5"], ["--target-bpw", "12", "--calib", self.calib]):
            r = run("quantize", self.f32, never, "--type", "q4_k", *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertFalse(os.path.exists(never))
            # Refused before any calibration pass (the cheapest plan needs no measurement).
            self.assertNotIn("sensitivity", r.stderr, args)

    def test_bad_input(self):
        d = self.dir.name
        out = os.path.join(d, "never.gguf")
        short = os.path.join(d, "short.txt")
        with open(short, "w") as f:
            f.write("Once upon a time.")
        r = run("imatrix", "-m", self.f32, "-f", short, "--ctx", "128", "-o", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("tokens", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = run("imatrix", "-m", self.f32, "-f", self.calib, "-o", out, "--output-format", "npy")
        self.assertEqual(r.returncode, 2)
        self.assertFalse(os.path.exists(out))
        # An imatrix made for another model: names or widths differ.
        other = os.path.join(d, "other.gguf")
        r = run("imatrix", "-m", os.path.join(SHARED, "models", "stories260K", "stories260K.gguf"), "-f", self.calib,
                "--ctx", "64", "--chunks", "2", "-o", other)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("quantize", self.f32, out, "--type", "q4_k", "--imatrix", other)
        self.assertEqual(r.returncode, 2)
        self.assertIn("another model", r.stderr)
        self.assertFalse(os.path.exists(out))
        # Garbage, and a truncated legacy file.
        junk = os.path.join(d, "junk.dat")
        with open(os.path.join(d, "im.dat"), "rb") as f:
            good = f.read()
        for data in (b"\x07\x00\x00\x00garbage", good[:len(good) // 2]):
            with open(junk, "wb") as f:
                f.write(data)
            r = run("quantize", self.f32, out, "--type", "q4_k", "--imatrix", junk)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
