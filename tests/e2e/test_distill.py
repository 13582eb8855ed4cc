"""tools/train/distill.py: a 2:4-pruned tinystories-3m student trained
against the dense teacher keeps its zeros exactly, keeps the file's
metadata and tensor types, runs in infera with a lower perplexity than
before, and resumes from its checkpoint; early stopping on held-out text
writes the best student; bad input is refused."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from common import REPO, infera, shared

sys.path.insert(0, os.path.join(REPO, "tools", "train"))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import quant_reference as qr  # noqa: E402

TS3M = shared("models", "tinystories-3m")
F32 = os.path.join(TS3M, "tinystories-3m-f32.gguf")
HELDOUT = os.path.join(TS3M, "heldout.txt")
DISTILL = os.path.join(REPO, "tools", "train", "distill.py")
INFERA = os.path.abspath(os.environ.get("INFERA_BIN", os.path.join(REPO, "build", "tools", "infera")))


def distill(*args):
    # One torch thread: this 3M model's steps are too small to split. Alone on
    # 2 cores the suite took 47 s wall / 80 s CPU with 2 threads, 26 s / 39 s
    # with 1 (and ctest runs another test beside it).
    return subprocess.run(["/usr/bin/python3", DISTILL, "--infera", INFERA, "--threads", "1", *args],
                          capture_output=True, text=True, timeout=900)


def ppl(model):
    r = infera("perplexity", "-m", model, "-f", HELDOUT, "-c", "128", "--chunks", "20", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ppl"]


@unittest.skipUnless(os.path.exists(TS3M), "../shared not present")
class DistillTest(unittest.TestCase):
    def test_recovers_and_keeps_masks(self):
        with tempfile.TemporaryDirectory() as d:
            train = os.path.join(d, "train.txt")
            with open(HELDOUT) as f:
                text = f.read()
            with open(train, "w") as f:
                f.write(text[len(text) // 2:])  # evaluation reads the first chunks
            student = os.path.join(d, "pruned.gguf")
            r = infera("prune", F32, student, "--method", "magnitude", "--pattern", "2:4")
            self.assertEqual(r.returncode, 0, r.stderr)
            out = os.path.join(d, "recovered.gguf")
            args = ["--teacher", F32, "--student", student, "--text", train, "--out", out, "--batch", "8",
                    "--seq", "128", "--lr", "1e-3", "--save-every", "10"]
            r = distill(*args, "--steps", "10")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = distill(*args, "--steps", "30")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("resuming at step 10", r.stderr)
            before, after = qr.read_gguf_tensors(student), qr.read_gguf_tensors(out)
            self.assertEqual(sorted(before), sorted(after))
            changed = 0
            for name, (typ, ne, raw) in before.items():
                self.assertEqual((after[name][0], after[name][1]), (typ, ne), name)
                a = np.frombuffer(raw, dtype="<f4")
                b = np.frombuffer(after[name][2], dtype="<f4")
                if (".ffn_" in name or ".attn_" in name) and "norm" not in name:
                    np.testing.assert_array_equal(b[a == 0], 0, name)  # zeros stay zeros
                changed += int((a != b).any())
            self.assertGreater(changed, 20)
            info = infera("info", out, "--sparsity")
            self.assertIn(b"pruning:           magnitude, 2:4", info.stdout)
            self.assertLess(ppl(out), ppl(student))

    def test_early_stopping_keeps_the_best_student(self):
        """--val: a run whose training only hurts (a learning rate far too
        high) stops after --patience measurements and writes the student as
        given, byte for byte; a normal run writes its best later step."""
        with tempfile.TemporaryDirectory() as d:
            with open(HELDOUT) as f:
                text = f.read()
            train, val = os.path.join(d, "train.txt"), os.path.join(d, "val.txt")
            with open(train, "w") as f:
                f.write(text[len(text) // 2:])
            with open(val, "w") as f:
                f.write(text[len(text) // 4:len(text) // 2])
            student = os.path.join(d, "pruned.gguf")
            r = infera("prune", F32, student, "--method", "magnitude", "--pattern", "2:4")
            self.assertEqual(r.returncode, 0, r.stderr)
            common = ["--teacher", F32, "--student", student, "--text", train, "--val", val, "--batch", "4",
                      "--seq", "64", "--val-tokens", "1024", "--val-every", "2"]
            out = os.path.join(d, "hurt.gguf")
            r = distill(*common, "--out", out, "--lr", "0.5", "--steps", "40", "--patience", "2")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("stopping early at step 4", r.stderr)
            self.assertIn("the student as given", r.stderr)
            before, after = qr.read_gguf_tensors(student), qr.read_gguf_tensors(out)
            for name in before:
                self.assertEqual(before[name][2], after[name][2], name)
            out = os.path.join(d, "better.gguf")
            r = distill(*common, "--out", out, "--lr", "1e-3", "--steps", "6")
            self.assertEqual(r.returncode, 0, r.stderr)
            kls = [float(x.split("validation KL ")[1].split()[0])
                   for x in r.stderr.split("\n") if x.startswith("distill: step")]
            self.assertEqual(len(kls), 4)  # steps 0, 2, 4, 6
            best = kls.index(min(kls))
            self.assertGreater(best, 0, r.stderr)
            self.assertIn(f"writing the step-{2 * best} student", r.stderr)
            r = distill(*common, "--out", out, "--val-every", "0")
            self.assertEqual(r.returncode, 2)

    def test_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "x.gguf")
            r = distill("--teacher", F32, "--student", os.path.join(d, "missing.gguf"), "--text", HELDOUT, "--out", out)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no such file", r.stderr)
            q = os.path.join(TS3M, "tinystories-3m-q8_0.gguf")
            r = distill("--teacher", F32, "--student", q, "--text", HELDOUT, "--out", out, "--steps", "1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("quantized", r.stderr)
            r = distill("--teacher", F32, "--student", F32, "--text", HELDOUT, "--out", F32)
            self.assertEqual(r.returncode, 2)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
