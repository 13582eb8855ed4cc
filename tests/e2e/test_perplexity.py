"""`infera perplexity` follows llama-perplexity's method: on tinystories-3m
(F32, F16 and every quantized file llama.cpp made) it reproduces llama.cpp's
own numbers within 0.5 %; KL divergence against a
base run works; bad input is refused."""
import csv
import json
import os
import tempfile
import unittest

from common import infera, shared

TS3M = shared("models", "tinystories-3m")
STORIES = shared("models", "stories260K", "stories260K.gguf")


def ppl(*args):
    r = infera("perplexity", *args, "--json")
    if r.returncode != 0:
        raise AssertionError(r.stderr.decode())
    return json.loads(r.stdout)


@unittest.skipUnless(os.path.exists(TS3M), "../shared not present")
class PerplexityTest(unittest.TestCase):
    def test_matches_llama_cpp(self):
        with open(os.path.join(TS3M, "EXPECTED.tsv")) as f:
            expected = {row["file"]: row for row in csv.DictReader(f, delimiter="\t")}
        for name in sorted(expected):
            got = ppl("-m", os.path.join(TS3M, name), "-f", os.path.join(TS3M, "heldout.txt"), "--ctx", "128",
                      "--chunks", "40")
            want = float(expected[name]["ppl"])
            self.assertLess(abs(got["ppl"] - want) / want, 0.005, f"{name}: {got['ppl']} vs llama.cpp {want}")
            self.assertAlmostEqual(got["ppl_stderr"], float(expected[name]["ppl_stderr"]), delta=0.01)
            self.assertEqual((got["chunks"], got["ctx"], got["tokens"]), (40, 128, 40 * 63))

    def test_kl_divergence(self):
        text = os.path.join(TS3M, "heldout.txt")
        with tempfile.TemporaryDirectory() as d:
            base = os.path.join(d, "base.kld")
            ppl("-m", os.path.join(TS3M, "tinystories-3m-f32.gguf"), "-f", text, "--ctx", "128", "--chunks", "8",
                "--kl-divergence-base", base)
            same = ppl("-m", os.path.join(TS3M, "tinystories-3m-f32.gguf"), "-f", text, "--ctx", "128", "--chunks", "8",
                       "--kl-divergence-base", base, "--kl-divergence")
            self.assertLess(same["kld"], 1e-9)
            self.assertEqual(same["top1_agreement"], 1.0)
            f16 = ppl("-m", os.path.join(TS3M, "tinystories-3m-f16.gguf"), "-f", text, "--ctx", "128", "--chunks", "8",
                      "--kl-divergence-base", base, "--kl-divergence")
            self.assertGreater(f16["kld"], 0)
            self.assertLess(f16["kld"], 1e-4)
            self.assertGreater(f16["top1_agreement"], 0.98)
            # A base made with other settings is refused.
            r = infera("perplexity", "-m", os.path.join(TS3M, "tinystories-3m-f16.gguf"), "-f", text, "--ctx", "64",
                       "--kl-divergence-base", base, "--kl-divergence")
            self.assertEqual(r.returncode, 2)

    def test_bf16_attention_products_stay_within_tolerance(self):
        """--attn-dtype bf16 (queries, K, V and probabilities rounded to
        bf16) against f32 products on the same model and text at its whole
        trained context (256 positions, four softmax steps): KL divergence
        < 1e-4 (measured 2.4e-6), top-1 agreement > 0.98, perplexity within
        0.5 %; --kv-cache-type bf16 gives exactly the same numbers."""
        text = os.path.join(TS3M, "heldout.txt")
        model = os.path.join(TS3M, "tinystories-3m-f32.gguf")
        with tempfile.TemporaryDirectory() as d:
            base = os.path.join(d, "base.kld")
            f32 = ppl("-m", model, "-f", text, "--ctx", "256", "--chunks", "8", "--kl-divergence-base", base)
            bf16 = ppl("--attn-dtype", "bf16", "-m", model, "-f", text, "--ctx", "256", "--chunks", "8",
                       "--kl-divergence-base", base, "--kl-divergence")
            self.assertGreater(bf16["kld"], 0)  # the rounding shows
            self.assertLess(bf16["kld"], 1e-4)
            self.assertGreater(bf16["top1_agreement"], 0.98)
            self.assertLess(abs(bf16["ppl"] - f32["ppl"]) / f32["ppl"], 0.005)
            # A bf16 cache holds the same rounded values: the same numbers.
            cache16 = ppl("--kv-cache-type", "bf16", "-m", model, "-f", text, "--ctx", "256", "--chunks", "8",
                          "--kl-divergence-base", base, "--kl-divergence")
            self.assertEqual((cache16["ppl"], cache16["kld"]), (bf16["ppl"], bf16["kld"]))
            print(f"bf16 products: ppl {bf16['ppl']:.4f} vs {f32['ppl']:.4f}, KLD {bf16['kld']:.2e}, "
                  f"top-1 {bf16['top1_agreement']:.4f}")

    def test_bf16_matmul_products_stay_within_tolerance(self):
        """--matmul-dtype bf16 (F32 / F16 weights and activations rounded to
        bf16 for the float matmuls) against f32 products, on the F16 and the
        F32 file: KL divergence < 1e-4 (measured 6e-6 on both), top-1
        agreement > 0.98, perplexity within 0.5 %; the Q8_0 file is
        untouched by the option (the same numbers)."""
        text = os.path.join(TS3M, "heldout.txt")
        args = ["-f", text, "--ctx", "256", "--chunks", "8"]
        with tempfile.TemporaryDirectory() as d:
            for name in ("tinystories-3m-f16.gguf", "tinystories-3m-f32.gguf"):
                model = os.path.join(TS3M, name)
                base = os.path.join(d, name + ".kld")
                f32 = ppl("-m", model, *args, "--kl-divergence-base", base)
                bf16 = ppl("--matmul-dtype", "bf16", "-m", model, *args, "--kl-divergence-base", base,
                           "--kl-divergence")
                self.assertGreater(bf16["kld"], 0, name)  # the rounding shows
                self.assertLess(bf16["kld"], 1e-4, name)
                self.assertGreater(bf16["top1_agreement"], 0.98, name)
                self.assertLess(abs(bf16["ppl"] - f32["ppl"]) / f32["ppl"], 0.005, name)
                print(f"{name} bf16 matmuls: ppl {bf16['ppl']:.4f} vs {f32['ppl']:.4f}, KLD {bf16['kld']:.2e}")
            q8 = os.path.join(TS3M, "tinystories-3m-q8_0.gguf")
            self.assertEqual(ppl("--matmul-dtype", "bf16", "-m", q8, *args)["ppl"], ppl("-m", q8, *args)["ppl"])
        r = infera("--matmul-dtype", "f8", "perplexity", "-m", os.path.join(TS3M, "tinystories-3m-f32.gguf"), *args)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)

    @unittest.skipUnless(os.path.exists(STORIES), "../shared not present")
    def test_wikitext_and_tinystories_give_finite_values(self):
        for model, text in ((STORIES, shared("data", "eval", "tinystories", "tinystories_197k.txt")),
                            (STORIES, shared("data", "eval", "wikitext-2", "wiki.test.raw"))):
            got = ppl("-m", model, "-f", text, "--ctx", "256", "--chunks", "4")
            self.assertGreater(got["ppl"], 1.0)
            self.assertLess(got["ppl"], 1e6)

    def test_bad_input(self):
        for args in (["-f", "/nonexistent.txt"], ["-f", os.path.join(TS3M, "heldout.txt"), "--ctx", "2"],
                     ["-f", os.path.join(TS3M, "heldout.txt"), "--chunks", "0"],
                     ["-f", os.path.join(TS3M, "heldout.txt"), "--kl-divergence"]):
            r = infera("perplexity", "-m", os.path.join(TS3M, "tinystories-3m-f32.gguf"), *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
