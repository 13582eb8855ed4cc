"""The bundled demo model (models/kjv-7m, trained by tools/train): exact
against the numpy reference, the same logits from its GGUF and its HF
export, infera's held-out perplexity equal to the training tool's own
evaluation, the default model of `infera run`, and its bundled draft model
(models/kjv-draft-1m) for speculative decoding."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from common import INFERA, REPO, SANITIZED, infera, shared

sys.path.insert(0, os.path.join(REPO, "tools", "py"))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import model_files as mf  # noqa: E402
import reference as ref  # noqa: E402

DEMO = os.path.join(REPO, "models", "kjv-7m")
GGUF = os.path.join(DEMO, "kjv-7m.gguf")
HF = os.path.join(DEMO, "hf")
DRAFT = os.path.join(REPO, "models", "kjv-draft-1m", "kjv-draft-1m.gguf")


def logits(model, tokens):
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        subprocess.run([INFERA, "eval-logits", "--model", model, "--tokens", " ".join(map(str, tokens)), "--out", out.name],
                       check=True, capture_output=True)
        return np.fromfile(out.name, dtype=np.float32).reshape(len(tokens), -1)


def rel_err(a, b):
    return float(np.max(np.max(np.abs(a - b), axis=-1) / np.max(np.abs(b), axis=-1)))


@unittest.skipUnless(os.path.exists(GGUF), "demo model not present")
class DemoModelTest(unittest.TestCase):
    def test_matches_numpy_reference_and_formats_agree(self):
        with open(os.path.join(HF, "config.json")) as f:
            cfg = json.load(f)
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
        W = mf.read_safetensors(os.path.join(HF, "model.safetensors"))
        tokens = [1] + list(range(300, 340))
        want = ref.forward(cfg, W, tokens)
        got_gguf, got_hf = logits(GGUF, tokens), logits(HF, tokens)
        self.assertLess(rel_err(got_hf, want), 1e-4)
        self.assertLess(rel_err(got_gguf, want), 1e-4)
        self.assertEqual(got_gguf.tobytes(), got_hf.tobytes())  # same canonical layout: bit-identical

    @unittest.skipIf(SANITIZED, "the release build's arithmetic, checked in its run; perplexity runs under the "
                     "sanitizers in test_wikitext_perplexity_is_finite and the pruning and W8A8 suites")
    def test_perplexity_matches_training_tool(self):
        with open(os.path.join(DEMO, "tool_eval.json")) as f:
            tool = json.load(f)
        # 387 chunks: 6 s in the release build on 2 vCPUs, 22 s under ASan.
        r = infera("perplexity", "--model", GGUF, "-f", os.path.join(DEMO, "heldout.txt"), "--ctx", str(tool["ctx"]), "--json",
                   timeout=880)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(got["chunks"], tool["chunks"])
        self.assertLess(abs(got["ppl"] - tool["heldout_ppl"]) / tool["heldout_ppl"], 0.01, (got, tool))

    @unittest.skipUnless(os.path.exists(shared("data", "eval", "wikitext-2", "wiki.test.raw")),
                         "../shared (WikiText-2) not present")
    def test_wikitext_perplexity_is_finite(self):
        r = infera("perplexity", "--model", GGUF, "-f", shared("data", "eval", "wikitext-2", "wiki.test.raw"),
                   "--ctx", "256", "--chunks", "4", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        ppl = json.loads(r.stdout)["ppl"]
        self.assertTrue(1 < ppl < 1e5, ppl)

    def test_default_model_writes_text(self):
        with tempfile.TemporaryDirectory() as d:  # from any working directory
            r = subprocess.run([INFERA, "run", "-p", "In the beginning", "-n", "48", "--temp", "0"], capture_output=True,
                               cwd=d)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout.decode()
        self.assertTrue(text.startswith("In the beginning"))
        words = text.split()
        self.assertGreater(len(words), 20)
        letters = sum(c.isalpha() or c.isspace() for c in text)
        self.assertGreater(letters / len(text), 0.85, text)  # readable words, not byte noise

    @unittest.skipUnless(os.path.exists(DRAFT), "draft model not present")
    def test_bundled_draft_model_gives_the_same_text(self):
        # Greedy decoding with the draft verifying every step (--draft-p-min 0:
        # always drafting) writes exactly the text of plain decoding, and the
        # draft, distilled from this model, is right more often than not.
        def run(*extra):
            r = infera("run", "--model", GGUF, "-p", "And God said", "-n", "64", "--temp", "0", "--ignore-eos", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout, r.stderr.decode()
        plain, _ = run("--spec", "none")
        spec, log = run("--draft-model", DRAFT, "--draft-p-min", "0", "--draft-max", "4")
        self.assertEqual(spec, plain)
        m = re.search(r"(\d+) drafted, (\d+) accepted", log)
        self.assertIsNotNone(m, log)
        drafted, accepted = int(m.group(1)), int(m.group(2))
        self.assertGreater(drafted, 0, log)
        self.assertGreater(accepted / drafted, 0.5, log)
        # A draft context shorter than the prompt (llama.cpp's -cd spelling
        # too): the same text; a negative one is refused.
        for flag in ("--draft-ctx", "-cd"):
            short, log = run("--draft-model", DRAFT, "--draft-p-min", "0", "--draft-max", "4", flag, "2")
            self.assertEqual(short, plain)
            self.assertRegex(log, r"[1-9]\d* drafted")
        r = infera("run", "--model", GGUF, "-p", "And God said", "-n", "4", "--draft-model", DRAFT, "--draft-ctx", "-1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--draft-ctx", r.stderr.decode())
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)

    def test_chat_template_is_chatml(self):
        r = infera("info", GGUF)
        self.assertEqual(r.returncode, 0)
        ids = infera("tokenize", "--model", GGUF, "--parse-special", "<|im_start|>").stdout.decode().split()
        self.assertEqual(len(ids), 1)  # one token
        with open(os.path.join(HF, "tokenizer_config.json")) as f:
            self.assertIn("<|im_start|>", json.load(f)["chat_template"])


if __name__ == "__main__":
    unittest.main()
