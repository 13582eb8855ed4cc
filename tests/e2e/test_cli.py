"""Bad input to the CLI: one clear line on stderr, exit code 2, nothing on
stdout, never a crash."""
import os
import struct
import tempfile
import unittest

from common import infera, shared

STORIES = shared("models", "stories260K", "stories260K.gguf")


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_bad(self, *args, needle=None):
        r = infera(*args)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 2, f"{args}: rc={r.returncode} stderr={err}")
        self.assertEqual(r.stdout, b"", f"{args}: wrote to stdout")
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"{args}: expected one line, got {err!r}")
        self.assertTrue(lines[0].startswith("infera: error: "), lines[0])
        if needle:
            self.assertIn(needle, lines[0])
        return lines[0]

    def path(self, name, data):
        p = os.path.join(self.dir, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def test_missing_path(self):
        self.assert_bad("run", "--model", "/nonexistent/model.gguf", "-p", "x", needle="no such file")

    def test_folder_without_config(self):
        d = os.path.join(self.dir, "emptydir")
        os.makedirs(d, exist_ok=True)
        self.assert_bad("run", "--model", d, "-p", "x", needle="config.json")

    def test_unsupported_architecture(self):
        d = os.path.join(self.dir, "gpt2dir")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write('{"model_type": "gpt2", "vocab_size": 10}')
        self.assert_bad("run", "--model", d, "-p", "x", needle="unsupported architecture 'gpt2'")

    def test_unsupported_gguf_architecture(self):
        data = struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", 20) + b"general.architecture" + \
            struct.pack("<IQ", 8, 5) + b"mamba"
        self.assert_bad("info", self.path("mamba.gguf", data), needle="unsupported architecture 'mamba'")

    def test_unsupported_dtype(self):
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "py"))
        import model_files as mf
        import test_reference as tr
        cfg, W = tr.make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), 3)
        path = os.path.join(self.dir, "i8.gguf")
        tr.write_gguf(path, cfg, W)
        # Rewrite with one weight matrix stored as i8, a type with no matmul kernel.
        orig = mf.write_gguf
        def patched(p, kvs, tensors, alignment=32):
            tensors = [(n, a, mf.GGML_I8 if n == "blk.0.attn_v.weight" else t) for n, a, t in tensors]
            orig(p, kvs, tensors, alignment)
        mf.write_gguf = patched
        try:
            tr.write_gguf(path, cfg, W)
        finally:
            mf.write_gguf = orig
        self.assert_bad("run", "--model", path, "-p", "x", needle="i8")

    @unittest.skipUnless(os.path.exists(STORIES), "../shared not present")
    def test_truncated_file(self):
        with open(STORIES, "rb") as f:
            data = f.read()
        for cut in (10, 3000, len(data) // 2, len(data) - 1):
            self.assert_bad("run", "--model", self.path(f"trunc{cut}.gguf", data[:cut]), "-p", "x")

    @unittest.skipUnless(os.path.exists(STORIES), "../shared not present")
    def test_corrupt_file(self):
        with open(STORIES, "rb") as f:
            data = bytearray(f.read())
        data[0:4] = b"GGUF"
        data[24:32] = struct.pack("<Q", 1 << 62)  # key length of the first KV
        self.assert_bad("info", self.path("corrupt.gguf", bytes(data)))
        self.assert_bad("info", self.path("garbage.bin", os.urandom(4096)))
        self.assert_bad("info", self.path("garbage.xyz", os.urandom(4096)), needle="unrecognized")

    @unittest.skipUnless(os.path.exists(STORIES), "../shared not present")
    def test_prompt_longer_than_context(self):
        self.assert_bad("run", "--model", STORIES, "-p", "word " * 100, "-c", "16", needle="context holds 16")

    @unittest.skipUnless(os.path.exists(STORIES), "../shared not present")
    def test_invalid_option_values(self):
        m = ["run", "--model", STORIES, "-p", "x"]
        self.assert_bad(*m, "-n", "-5", needle="-n")
        self.assert_bad(*m, "--temp", "-1", needle="temperature")
        self.assert_bad(*m, "--top-p", "0", needle="top_p")
        self.assert_bad(*m, "--top-p", "1.5", needle="top_p")
        self.assert_bad(*m, "-n", "abc")
        self.assert_bad(*m, "--kv-cache-type", "f16", needle="--kv-cache-type")
        self.assert_bad(*m, "--context-keep", "-1", needle="--context-keep")
        self.assert_bad("run", "--model", STORIES, "-i", "--context-shift", needle="not to the chat")
        self.assert_bad(*m, "--no-such-flag")
        self.assert_bad("run", "--model", STORIES, "-p", "x", "-f", "/nonexistent/prompt.txt")
        self.assert_bad(*m, "--cpu-isa", "avx9", needle="--cpu-isa must be scalar, avx2, avx512 or amx")
        with open("/proc/cpuinfo") as f:
            has_amx = " amx_int8" in f.read()
        if not has_amx:  # (--cpu-isa amx runs where the CPU has the tile unit)
            self.assert_bad(*m, "--cpu-isa", "amx", needle="not supported by this CPU")

    def test_no_subcommand_and_unknown_subcommand(self):
        self.assert_bad()
        self.assert_bad("frobnicate")

    def test_help_is_not_an_error(self):
        r = infera("run", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--n-predict", r.stdout)


if __name__ == "__main__":
    unittest.main()
