"""src/quant's GPTQ and AWQ scale search against the independent numpy implementation in
quant_reference.py on small layers (same damping, group size, order):
dequantized weights within 1e-5; the blocks written dequantize (by the numpy
block reader) to exactly those weights; and GPTQ's output error on the
calibration inputs is below plain rounding's."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_reference as qr  # noqa: E402

HARNESS = os.environ.get("QUANT_HARNESS", "build/tests/quant_harness")
INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
TS3M = os.path.join(SHARED, "models", "tinystories-3m")
STORIES = os.path.join(SHARED, "data", "eval", "tinystories", "tinystories_197k.txt")
GGML = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_K": 10, "q3_K": 11, "q4_K": 12, "q5_K": 13,
        "q6_K": 14, "iq4_nl": 20, "iq4_xs": 23}
BLOCK_TYPES = ("q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs")
# The legacy 32-blocks with weighted scales (the type's imatrix search).
WEIGHTED_LEGACY = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")


def run(qtype, group, act_order, w, x, weighted=False):
    with tempfile.TemporaryDirectory() as d:
        wp, xp, op, bp = (os.path.join(d, f) for f in ("w.f32", "x.f32", "out.f32", "out.blocks"))
        w.astype("<f4").tofile(wp)
        x.astype("<f4").tofile(xp)
        r = subprocess.run([HARNESS, "gptq", qtype, str(group), str(int(act_order)), str(w.shape[0]), str(w.shape[1]),
                            wp, xp, str(x.shape[0]), op, bp] + (["weighted"] if weighted else []),
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(bp, "rb") as f:
            blocks = f.read()
        return np.fromfile(op, dtype="<f4").reshape(w.shape), blocks


def harness_rtn(qtype, w, x):
    """src/quant's importance-weighted rounding (imatrix = mean x^2)."""
    with tempfile.TemporaryDirectory() as d:
        wp, xp, op, bp = (os.path.join(d, f) for f in ("w.f32", "x.f32", "out.f32", "out.blocks"))
        w.astype("<f4").tofile(wp)
        x.astype("<f4").tofile(xp)
        r = subprocess.run([HARNESS, "rtn", qtype, str(w.shape[0]), str(w.shape[1]), wp, xp, str(x.shape[0]), op, bp],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(bp, "rb") as f:
            blocks = f.read()
        return np.fromfile(op, dtype="<f4").reshape(w.shape), blocks


def correlated(seed, rows, cols, tokens):
    """Correlated inputs (a low-rank part plus noise, uneven channel scales),
    as real activations are: that is what the error feedback exploits."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    z = rng.standard_normal((tokens, 32))
    x = ((z @ rng.standard_normal((32, cols)) + 0.3 * rng.standard_normal((tokens, cols)))
         * np.exp(rng.standard_normal(cols))).astype(np.float32)
    return w, x


def rtn(w, qtype, group=32):
    """Round-to-nearest with the same group parameters (no error feedback)."""
    kind, n = qr.GPTQ_GRID[qtype]
    out = np.zeros(w.shape)
    for r in range(w.shape[0]):
        for g in range(0, w.shape[1], group):
            v = w[r, g:g + group].astype(np.float64)
            d, m = qr._gptq_params(kind, n, v)
            out[r, g:g + group] = qr._gptq_round(kind, n, d, m, v)
    return out


def case(seed, rows, cols, tokens):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    scale = np.exp(rng.standard_normal(cols)).astype(np.float32)  # uneven channels, as real activations
    x = (rng.standard_normal((tokens, cols)) * scale).astype(np.float32)
    x[:, 5] = 0  # an input never active
    return w, x


class GptqTest(unittest.TestCase):
    def test_matches_numpy(self):
        w, x = case(1, 24, 256, 400)
        for qtype, group, act in (("q4_0", 32, False), ("q4_0", 128, False), ("q4_0", 32, True), ("q4_1", 64, False),
                                  ("q5_0", 32, True), ("q5_1", 32, False), ("q8_0", 32, False)):
            got, blocks = run(qtype, group, act, w, x)
            want = qr.gptq(w, x, qtype, group=group, act_order=act)
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            self.assertLess(err, 1e-5, (qtype, group, act))
            back = qr.dequantize(GGML[qtype], blocks).reshape(w.shape)
            np.testing.assert_array_equal(back, got, err_msg=f"{qtype} {group} {act}")
            self.assertTrue(np.all(got[:, 5] == 0) or qtype in ("q4_1", "q5_1"))

    def test_lower_output_error_than_rounding(self):
        # With independent channels H is nearly diagonal and there is little
        # for the error feedback to do.
        w, x = correlated(2, 32, 256, 600)
        for qtype in ("q4_0", "q4_1", "q5_0"):
            for act in (False, True):
                got, _ = run(qtype, 32, act, w, x)
                e_gptq = np.linalg.norm(x @ (got - w).T)
                e_rtn = np.linalg.norm(x @ (rtn(w, qtype) - w).T)
                self.assertLess(e_gptq, (0.2 if act else 0.6) * e_rtn, (qtype, act))

    def test_block_types_beat_importance_weighted_rounding(self):
        # K-quants and IQ4: scales fitted by the type's own imatrix quantizer,
        # codes by GPTQ. The blocks dequantize (numpy's reader) to exactly the
        # weights returned, and the output error is well below the same
        # type's importance-weighted rounding with the same importances.
        w, x = correlated(3, 24, 512, 800)
        for qtype in BLOCK_TYPES + WEIGHTED_LEGACY:
            _, rtn_blocks = harness_rtn(qtype, w, x)
            e_rtn = np.linalg.norm(x @ (qr.dequantize(GGML[qtype], rtn_blocks).reshape(w.shape) - w).T)
            for act in (False, True):
                got, blocks = run(qtype, 32, act, w, x, weighted=True)
                back = qr.dequantize(GGML[qtype], blocks).reshape(w.shape)
                np.testing.assert_array_equal(back, got, err_msg=f"{qtype} {act}")
                e_gptq = np.linalg.norm(x @ (got - w).T)
                self.assertLess(e_gptq, (0.5 if act else 0.75) * e_rtn, (qtype, act, e_gptq / e_rtn))

    def test_block_types_with_diagonal_hessian_are_imatrix_rounding(self):
        # Inputs that never co-occur (one channel per token) make H diagonal:
        # no error crosses columns, so GPTQ must reduce to the type's own
        # importance-weighted rounding, byte for byte (IQ4's quantizers round
        # codes against the unrounded scale, GPTQ against the stored f16 one:
        # those agree on nearly every code). The legacy types' weighted
        # search takes sigma^2 over the block GPTQ fits rather than the
        # whole row: not the same bytes, the same weighted error within 2 %.
        rng = np.random.default_rng(4)
        rows, cols = 16, 512
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        x = np.zeros((4 * cols, cols), dtype=np.float32)
        gain = np.exp(rng.standard_normal(cols))
        for t in range(4 * cols):
            x[t, t % cols] = gain[t % cols] * rng.standard_normal()
        for qtype in BLOCK_TYPES + WEIGHTED_LEGACY:
            got, blocks = run(qtype, 32, False, w, x, weighted=True)
            want, want_blocks = harness_rtn(qtype, w, x)
            if qtype.startswith("iq4"):
                self.assertGreater(np.mean(got == want), 0.99, qtype)
            elif qtype in WEIGHTED_LEGACY:
                h = np.sum(x.astype(np.float64) ** 2, axis=0)
                e_got, e_want = (np.sum(h * (v - w) ** 2) for v in (got, want))
                self.assertLess(e_got, 1.02 * e_want, qtype)
            else:
                self.assertEqual(blocks, want_blocks, qtype)


class AwqTest(unittest.TestCase):
    def test_scale_search_matches_numpy(self):
        rng = np.random.default_rng(4)
        w = rng.standard_normal((48, 256)).astype(np.float32)
        x = (rng.standard_normal((300, 256)) * np.exp(1.5 * rng.standard_normal(256))).astype(np.float32)
        x[:, :4] *= 40  # salient channels, as activation outliers make
        with tempfile.TemporaryDirectory() as d:
            wp, xp, op = (os.path.join(d, f) for f in ("w.f32", "x.f32", "out.f32"))
            w.tofile(wp)
            x.tofile(xp)
            r = subprocess.run([HARNESS, "awq", "q4_0", "20", "48", "256", wp, xp, "300", op], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = np.fromfile(op, dtype="<f4")
        s, alpha, loss, plain = qr.awq_search(w, x)
        self.assertAlmostEqual(float(out[256]), alpha, places=6)
        np.testing.assert_allclose(out[:256], s, rtol=1e-6)
        self.assertLess(abs(out[257] - loss) / loss, 1e-4)
        self.assertLess(abs(out[258] - plain) / plain, 1e-4)
        self.assertGreater(alpha, 0)
        self.assertLess(loss, 0.9 * plain)  # scaling pays where channels are uneven


class SmoothQuantTest(unittest.TestCase):
    """SmoothQuant's factors and W8A8 rounding against numpy (issue 20)."""

    def test_factors_and_w8a8_rows_match_numpy(self):
        rng = np.random.default_rng(8)
        rows, cols, tokens = 40, 256, 200
        w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        x = rng.standard_normal((tokens, cols)).astype(np.float32)
        x[:, [3, 77, 200]] *= 60  # activation outlier channels
        x[:, 10] = 0  # a channel no token uses: factor 1
        for alpha in (0.5, 0.8):
            with tempfile.TemporaryDirectory() as d:
                wp, xp, op = (os.path.join(d, f) for f in ("w.f32", "x.f32", "out.f32"))
                w.tofile(wp)
                x.tofile(xp)
                r = subprocess.run([HARNESS, "smooth", str(alpha), str(rows), str(cols), wp, xp, str(tokens), op],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                out = np.fromfile(op, dtype="<f4")
            s, deq = qr.smoothquant(w, x, alpha)
            np.testing.assert_allclose(out[:cols], s, rtol=2e-6)
            self.assertEqual(out[10], 1.0)
            np.testing.assert_array_equal(out[cols:].reshape(rows, cols), deq)
            # The outlier channels' maxima are brought down to the others'.
            a = np.abs(x).max(axis=0)
            peak = lambda v: v.max() / np.median(v)
            self.assertGreater(peak(a), 40)
            self.assertLess(peak(a / out[:cols]), 0.5 * peak(a))


def infera(*args):
    return subprocess.run([INFERA, "--log-level", "warn", *args], capture_output=True, text=True)


@unittest.skipUnless(os.path.exists(TS3M) and os.path.exists(STORIES), "../shared not present")
class GptqCliTest(unittest.TestCase):
    def test_gptq_model_is_closer_to_f32_than_rtn(self):
        import json
        f32 = os.path.join(TS3M, "tinystories-3m-f32.gguf")
        heldout = os.path.join(TS3M, "heldout.txt")
        with tempfile.TemporaryDirectory() as d:
            calib = os.path.join(d, "calib.txt")
            with open(STORIES, encoding="utf-8") as f:
                text = f.read(60000)
            with open(calib, "w", encoding="utf-8") as f:
                f.write(text)
            base = os.path.join(d, "base.bin")
            r = infera("perplexity", "-m", f32, "-f", heldout, "-c", "128", "--chunks", "24",
                       "--kl-divergence-base", base)
            self.assertEqual(r.returncode, 0, r.stderr)
            kld = {}
            gq = ["--method", "gptq", "--calib", calib, "--calib-tokens", "1536"]
            for name, qtype, extra in (("rtn", "q4_0", []), ("gptq", "q4_0", gq + ["--act-order"]),
                                       ("awq-gptq", "q4_0", gq + ["--act-order", "--awq"]),
                                       ("rtn-k", "q4_k_m", []), ("gptq-k", "q4_k_m", gq)):
                out = os.path.join(d, name + ".gguf")
                r = infera("quantize", f32, out, "--type", qtype, *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = infera("perplexity", "-m", out, "-f", heldout, "-c", "128", "--chunks", "24",
                           "--kl-divergence-base", base, "--kl-divergence", "--json")
                self.assertEqual(r.returncode, 0, r.stderr)
                kld[name] = json.loads(r.stdout)["kld"]
            self.assertLess(kld["gptq"], 0.75 * kld["rtn"], kld)
            self.assertLess(kld["awq-gptq"], 0.9 * kld["rtn"], kld)  # AWQ moves little on a model without outliers
            # The K-quant mixture: GPTQ into Q4_K / Q6_K blocks (llama.cpp's layout, same types as rounding).
            self.assertLess(kld["gptq-k"], 0.8 * kld["rtn-k"], kld)
            tk, tr = (qr.read_gguf_tensors(os.path.join(d, n + ".gguf")) for n in ("gptq-k", "rtn-k"))
            self.assertEqual({n: v[0] for n, v in tk.items()}, {n: v[0] for n, v in tr.items()})
            self.assertIn("q4_K", {qr.TYPES[v[0]][0] for v in tk.values()})
            t = qr.read_gguf_tensors(os.path.join(d, "gptq.gguf"))
            self.assertEqual(qr.TYPES[t["blk.0.ffn_down.weight"][0]][0], "q4_0")
            self.assertEqual(qr.TYPES[t["output.weight"][0]][0], "q6_K")  # llama.cpp's rule, rounded
            # Bad combinations: one line, exit 2, nothing written.
            never = os.path.join(d, "never.gguf")
            short = os.path.join(d, "short.txt")
            with open(short, "w") as f:
                f.write("Once upon a time.")
            for args in (["--method", "gptq", "--type", "w8a8", "--calib", calib],
                         ["--method", "gptq", "--type", "f16", "--calib", calib],
                         ["--method", "gptq", "--type", "q4_0"],
                         ["--method", "awq2", "--type", "q4_0"],
                         ["--method", "gptq", "--type", "q4_0", "--calib", calib, "--group", "48"],
                         ["--method", "gptq", "--type", "q4_0", "--calib", short],
                         ["--awq", "--type", "q4_0"],
                         ["--awq", "--type", "q4_0", "--calib", calib, "--imatrix", calib],
                         ["--awq", "--type", "f16", "--calib", calib]):
                r = infera("quantize", f32, never, *args)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertFalse(os.path.exists(never))


if __name__ == "__main__":
    unittest.main()
