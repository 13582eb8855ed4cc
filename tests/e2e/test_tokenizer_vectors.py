"""Every tokenizer format and family matches the reference implementations'
test vectors exactly, encoding and decoding back (../shared/data/tokenizers)."""
import json
import os
import subprocess
import tempfile
import unittest

from common import INFERA, shared

T = shared("data", "tokenizers")
LLAMACPP = os.path.join(T, "llamacpp")
SEP = "\n__ggml_vocab_test__\n"


def load_cases(inp, out):
    with open(inp, encoding="utf-8") as f:
        texts = f.read().split(SEP)[:-1]
    with open(out, encoding="utf-8") as f:
        ids = [line.strip() for line in f.read().split("\n")]
    return list(zip(texts, ids))


def tokenize_many(model, texts, extra=()):
    """One `infera tokenize --split` run for all texts; one line of ids each."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "texts.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write(SEP.join(texts) + SEP)
        r = subprocess.run([INFERA, "tokenize", "--model", model, "--file", p, "--split", SEP, *extra], capture_output=True)
        if r.returncode != 0:
            raise AssertionError(r.stderr.decode())
    lines = r.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(texts), (len(lines), len(texts))
    return [line.strip() for line in lines]


def detokenize_many(model, id_lists):
    """One `infera detokenize --file --split` run for all id lists; the text
    of each."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ids.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write("".join(ids + "\n" for ids in id_lists))
        r = subprocess.run([INFERA, "detokenize", "--model", model, "--file", p, "--split", SEP], capture_output=True)
        if r.returncode != 0:
            raise AssertionError(r.stderr.decode())
    texts = r.stdout.decode("utf-8", errors="surrogateescape").split(SEP)
    assert texts[-1] == "" and len(texts) == len(id_lists) + 1, (len(texts), len(id_lists))
    return texts[:-1]


@unittest.skipUnless(os.path.exists(T), "../shared not present")
class VectorsTest(unittest.TestCase):
    def check(self, model, inp, out, extra=(), decode=True):
        cases = load_cases(inp, out)
        got = tokenize_many(model, [c[0] for c in cases], extra)
        failures = [f"case {i} {t!r}: got [{g}] want [{w}]" for i, ((t, w), g) in enumerate(zip(cases, got)) if g != w]
        self.assertEqual(failures, [], "\n".join(failures))
        if decode:  # decoding the expected ids gives the text back
            first = [(i, t, w) for i, (t, w) in enumerate(cases[:20]) if w]
            texts = detokenize_many(model, [w for _, _, w in first])
            bad = [i for (i, t, _), got in zip(first, texts) if got != t]
            self.assertEqual(bad, [], f"{model}: decode mismatches in cases {bad}")

    def test_llamacpp_gguf_vocabs(self):
        for name in ("llama-spm", "phi-3", "gpt-2", "falcon", "mpt", "starcoder", "deepseek-coder"):
            with self.subTest(vocab=name):
                g = os.path.join(LLAMACPP, f"ggml-vocab-{name}.gguf")
                self.check(g, g + ".inp", g + ".out")

    def test_llama3_tiktoken(self):
        d = os.path.join(T, "llama3")
        self.check(os.path.join(d, "tokenizer.model"), os.path.join(d, "ggml-vocab-llama-bpe.gguf.inp"),
                   os.path.join(d, "ggml-vocab-llama-bpe.gguf.out"))

    def test_gpt2_vocab_json_and_merges(self):
        g = os.path.join(LLAMACPP, "ggml-vocab-gpt-2.gguf")
        self.check(os.path.join(T, "gpt2-hf", "gpt2_vocab.json"), g + ".inp", g + ".out")

    def test_llama2_sentencepiece_model_and_llama2c_bin(self):
        g = os.path.join(LLAMACPP, "ggml-vocab-llama-spm.gguf")
        self.check(os.path.join(T, "llama2", "tokenizer.model"), g + ".inp", g + ".out")
        with open(os.path.join(T, "llama2", "llama2c_test_vectors.json")) as f:
            cases = json.load(f)["cases"]
        for model in ("tokenizer.model", "tokenizer.bin"):
            got = tokenize_many(os.path.join(T, "llama2", model), [c["text"] for c in cases], ["--add-special"])
            self.assertEqual(got, [" ".join(map(str, c["ids"])) for c in cases], model)

    def test_mistral_tokenizer_json_equals_sentencepiece(self):
        texts = [t for t, _ in load_cases(os.path.join(LLAMACPP, "ggml-vocab-llama-spm.gguf.inp"),
                                          os.path.join(LLAMACPP, "ggml-vocab-llama-spm.gguf.out"))]
        a = tokenize_many(os.path.join(T, "mistral", "tokenizer.model.v1"), texts)
        b = tokenize_many(os.path.join(T, "mistral", "hf-Mistral-7B-v0.1", "tokenizer.json"), texts)
        self.assertEqual(a, b)

    def test_special_tokens_only_when_asked(self):
        tok = os.path.join(T, "llama3", "tokenizer.model")
        plain = tokenize_many(tok, ["<|eot_id|>"])[0]
        special = tokenize_many(tok, ["<|eot_id|>"], ["--parse-special"])[0]
        self.assertEqual(special, "128009")
        self.assertNotEqual(plain, "128009")

    def test_megabyte_is_fast(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "big.txt")
            with open(shared("data", "eval", "wikitext-2", "wiki.test.raw"), encoding="utf-8") as f:
                text = f.read()[:1_000_000]
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
            for model in (os.path.join(T, "llama3", "tokenizer.model"), os.path.join(T, "llama2", "tokenizer.model")):
                r = subprocess.run([INFERA, "tokenize", "--model", model, "--file", p], capture_output=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertGreater(len(r.stdout.split()), 100_000)


if __name__ == "__main__":
    unittest.main()
