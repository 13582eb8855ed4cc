"""src/prune's magnitude, Wanda and SparseGPT (unstructured, 2:4, 4:8) against
the independent numpy implementations in prune_reference.py, on exact small
cases: identical masks, and SparseGPT's updated weights within 1e-5."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import prune_reference as ref  # noqa: E402

HARNESS = os.environ.get("PRUNE_HARNESS", "build/tests/prune_harness")


def run(method, w, x, sparsity, pattern, stdout=False):
    with tempfile.TemporaryDirectory() as d:
        wp, xp, op = (os.path.join(d, f) for f in ("w.f32", "x.f32", "out.f32"))
        w.astype("<f4").tofile(wp)
        x.astype("<f4").tofile(xp)
        r = subprocess.run([HARNESS, method, str(w.shape[0]), str(w.shape[1]), repr(sparsity), pattern, wp, xp,
                            str(x.shape[0]), op], capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr
        out = np.fromfile(op, dtype="<f4").reshape(w.shape)
        return out, (r.stdout if stdout else r.stderr)


def case(seed, rows, cols, tokens):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    # Inputs with very different channel scales (as real activations have),
    # so Wanda's and SparseGPT's masks differ from magnitude's.
    scale = np.exp(rng.standard_normal(cols)).astype(np.float32)
    x = (rng.standard_normal((tokens, cols)) * scale).astype(np.float32)
    return w, x


PATTERNS = [("unstructured", 0, 0), ("2:4", 2, 4), ("4:8", 4, 8)]


class PruneReferenceTest(unittest.TestCase):
    def test_magnitude_and_wanda_masks(self):
        for seed, (rows, cols) in enumerate([(16, 64), (7, 40), (32, 256)]):
            w, x = case(seed, rows, cols, 50)
            for name, n, m in PATTERNS:
                for sp in (0.3, 0.5, 0.7) if not m else (0.5,):
                    for method in ("magnitude", "wanda"):
                        with self.subTest(method=method, shape=(rows, cols), pattern=name, sparsity=sp):
                            got, err = run(method, w, x, sp, name)
                            self.assertIsNotNone(got, err)
                            want = ref.magnitude(w, sp, n, m) if method == "magnitude" else ref.wanda(w, x, sp, n, m)
                            np.testing.assert_array_equal(got == 0, want == 0)
                            np.testing.assert_array_equal(got, want)
                            expect = 1 - n / m if m else int(cols * sp) / cols
                            self.assertAlmostEqual(float((got == 0).mean()), expect, places=6)

    def test_wanda_differs_from_magnitude(self):
        w, x = case(11, 32, 128, 64)
        mag, _ = run("magnitude", w, x, 0.5, "unstructured")
        wan, _ = run("wanda", w, x, 0.5, "unstructured")
        self.assertGreater(float(((mag == 0) != (wan == 0)).mean()), 0.05)

    def test_sparsegpt(self):
        # cols > 128 so the lazy updates across blocks run; one dead input.
        for seed, (rows, cols, tokens) in enumerate([(12, 64, 80), (20, 272, 400), (9, 136, 300)]):
            w, x = case(100 + seed, rows, cols, tokens)
            x[:, 5] = 0.0
            for name, n, m in PATTERNS:
                for sp in (0.5, 0.6) if not m else (0.5,):
                    with self.subTest(shape=(rows, cols), pattern=name, sparsity=sp):
                        got, err = run("sparsegpt", w, x, sp, name)
                        self.assertIsNotNone(got, err)
                        want = ref.sparsegpt(w, x, sp, n, m)
                        np.testing.assert_array_equal(got == 0, want == 0)
                        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
                        self.assertTrue((got[:, 5] == 0).all())
                        if m:
                            groups = (got.reshape(rows, cols // m, m) != 0).sum(axis=2)
                            self.assertTrue((groups <= n).all())

    def test_sparsegpt_damp_auto(self):
        # --damp auto: each candidate prunes with the even tokens' Hessian and
        # is scored by ||(W - W') X_odd^T||^2, computed here from X itself;
        # the argmin then prunes with all of X. Few tokens per input channel
        # (the over-fitting case) and many.
        for seed, (rows, cols, tokens) in enumerate([(16, 128, 160), (12, 64, 2000), (8, 136, 300)]):
            w, x = case(300 + seed, rows, cols, tokens)
            for name, n, m in PATTERNS:
                with self.subTest(shape=(rows, cols, tokens), pattern=name):
                    got, out = run("sparsegpt-auto", w, x, 0.5, name, stdout=True)
                    self.assertIsNotNone(got, out)
                    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
                    errors = [float(e) for e in lines["errors"].split()]
                    want_errors = []
                    for damp in (0.01, 0.03, 0.1, 0.3):
                        trial = ref.sparsegpt(w, x[0::2], 0.5, n, m, damp=damp)
                        want_errors.append(float(np.sum((x[1::2].astype(np.float64) @ (w - trial).T.astype(np.float64)) ** 2)))
                    np.testing.assert_allclose(errors, want_errors, rtol=1e-4)
                    damp = (0.01, 0.03, 0.1, 0.3)[int(np.argmin(want_errors))]
                    self.assertEqual(float(lines["damp"]), damp)
                    if tokens >= 20 * cols:  # plenty of data: the paper's 1 % is best
                        self.assertEqual(damp, 0.01)
                    if tokens < 2 * cols:  # fewer odd tokens than inputs: regularize more
                        self.assertGreater(damp, 0.01)
                    want = ref.sparsegpt(w, x, 0.5, n, m, damp=damp)
                    np.testing.assert_array_equal(got == 0, want == 0)
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    def test_sparsegpt_beats_magnitude_on_output_error(self):
        w, x = case(7, 32, 256, 512)
        for name, n, m in PATTERNS:
            errs = {}
            for method in ("magnitude", "wanda", "sparsegpt"):
                got, err = run(method, w, x, 0.5, name)
                self.assertIsNotNone(got, err)
                errs[method] = float(np.linalg.norm(x @ (got - w).T))
            self.assertLess(errs["sparsegpt"], errs["wanda"], (name, errs))
            self.assertLess(errs["wanda"], errs["magnitude"], (name, errs))

    def test_bad_shapes(self):
        w, x = case(3, 4, 30, 10)
        got, err = run("wanda", w, x, 0.5, "4:8")
        self.assertIsNone(got)
        self.assertIn("multiple of 8", err)
        for sp in (0.0, 1.0, -0.1):
            got, err = run("magnitude", w, x, sp, "unstructured")
            self.assertIsNone(got)
            self.assertIn("(0, 1)", err)


if __name__ == "__main__":
    unittest.main()
