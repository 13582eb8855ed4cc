"""SentencePiece-style tokenizers match llama.cpp's test vectors exactly
(encode, and decode back). The byte-level BPE families come with Stage 1b."""
import os
import tempfile
import unittest

from common import infera, shared

VOCABS = shared("data", "tokenizers", "llamacpp")
SEP = "\n__ggml_vocab_test__\n"


def cases(name):
    with open(os.path.join(VOCABS, name + ".inp"), encoding="utf-8") as f:
        inp = f.read().split(SEP)[:-1]
    with open(os.path.join(VOCABS, name + ".out"), encoding="utf-8") as f:
        out = [line.strip() for line in f.read().split("\n")]
    return list(zip(inp, out))


@unittest.skipUnless(os.path.exists(VOCABS), "../shared not present")
class SpmVectorsTest(unittest.TestCase):
    def check(self, name):
        model = os.path.join(VOCABS, name)
        failures = []
        with tempfile.TemporaryDirectory() as d:
            for i, (text, want) in enumerate(cases(name)):
                p = os.path.join(d, f"{i}.txt")
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text)
                r = infera("tokenize", "--model", model, "--file", p)
                self.assertEqual(r.returncode, 0, r.stderr)
                got = r.stdout.decode().strip()
                if got != want:
                    failures.append(f"case {i} {text!r}: got [{got}] want [{want}]")
        self.assertEqual(failures, [], "\n".join(failures))

    def test_llama_spm(self):
        self.check("ggml-vocab-llama-spm.gguf")

    def test_phi3(self):
        self.check("ggml-vocab-phi-3.gguf")


if __name__ == "__main__":
    unittest.main()
