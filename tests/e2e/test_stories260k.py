"""stories260K (a real trained model): infera's greedy output equals the
reference implementation's texts A, B and D, from the GGUF and llama2.c files."""
import os
import re
import tempfile
import unittest

from common import infera, shared

DIR = shared("models", "stories260K")


def expected(label):
    with open(os.path.join(DIR, "EXPECTED_OUTPUT.txt"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"---BEGIN {label}---\n(.*?)\n---END {label}---", text, re.S)
    return m.group(1)


SOURCES = {
    "gguf": ["--model", os.path.join(DIR, "stories260K.gguf")],
    "llama2c": ["--model", os.path.join(DIR, "stories260K.bin"), "--tokenizer", os.path.join(DIR, "tok512.bin")],
}


@unittest.skipUnless(os.path.exists(DIR), "../shared not present")
class Stories260KTest(unittest.TestCase):
    def generate(self, source, prompt_args, n, temp="0"):
        r = infera("run", *SOURCES[source], *prompt_args, "-n", str(n), "--temp", temp)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return r.stdout.decode("utf-8")

    def test_texts(self):
        for source in SOURCES:
            for label, args, n in (("A", ["-p", ""], 200), ("B", ["-p", ""], 256), ("D", ["-p", "Zoo"], 57)):
                with self.subTest(source=source, text=label):
                    out = self.generate(source, args, n)
                    self.assertEqual(out.rstrip("\n"), expected(label))

    def test_prompt_from_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("Zoo")
        try:
            out = self.generate("gguf", ["-f", f.name], 57)
        finally:
            os.unlink(f.name)
        self.assertEqual(out.rstrip("\n"), expected("D"))

    def test_stdout_has_only_text(self):
        r = infera("--log-level", "info", "run", *SOURCES["gguf"], "-p", "Zoo", "-n", "5", "--temp", "0")
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.decode().startswith("Zoo was"), r.stdout)
        self.assertNotIn("kernels", r.stdout.decode())
        self.assertIn("kernels", r.stderr.decode())  # the chosen kernel variant is logged to stderr
        self.assertIn("tok/s", r.stderr.decode())

    def test_seeded_sampling_is_reproducible(self):
        args = ["-p", "Once", "--seed", "7"]
        a = self.generate("gguf", args, 40, temp="1.0")
        b = self.generate("gguf", args, 40, temp="1.0")
        c = self.generate("gguf", ["-p", "Once", "--seed", "8"], 40, temp="1.0")
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_stop_string(self):
        out = self.generate("gguf", ["-p", "Zoo", "--stop", "Lily"], 57)
        self.assertEqual(out.rstrip("\n"), "Zoo was a little girl named ")

    def test_run_uses_the_engine_features(self):
        # `run` is a client of the serving engine: the int8 KV cache and the
        # context shift work there too, and --no-display-prompt drops the
        # dummy-prefix space of the first piece.
        full = self.generate("gguf", ["-p", "Zoo"], 57)
        q8 = self.generate("gguf", ["-p", "Zoo", "--kv-cache-type", "q8"], 57)
        self.assertTrue(q8.startswith("Zoo was"), q8)
        r = infera("run", *SOURCES["gguf"], "-p", "Zoo", "-n", "40", "--temp", "0", "-c", "24", "--context-shift")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("generation: 40 tokens", r.stderr.decode())
        r = infera("run", *SOURCES["gguf"], "-p", "Zoo", "-n", "40", "--temp", "0", "-c", "24")
        self.assertIn("finish: context_full", r.stderr.decode())
        self.assertTrue(full.startswith(r.stdout.decode().rstrip("\n")), r.stdout)
        r = infera("run", *SOURCES["gguf"], "-p", "Zoo", "-n", "5", "--temp", "0", "--no-display-prompt")
        self.assertFalse(r.stdout.decode().startswith(" "), r.stdout)
        self.assertTrue(full[len("Zoo "):].startswith(r.stdout.decode().rstrip("\n")), r.stdout)

    def test_info_and_bench(self):
        r = infera("info", os.path.join(DIR, "stories260K.gguf"))
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        for needle in ("architecture:      llama", "layers:            5", "heads:             8 (kv heads 4",
                       "memory needed:"):
            self.assertIn(needle, out)
        r = infera("bench", *SOURCES["gguf"][:2], "-p", "32", "-n", "8", "-r", "2", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        rows = json.loads(r.stdout)
        self.assertEqual([x["test"] for x in rows], ["pp32", "tg8"])
        for x in rows:
            self.assertGreater(x["tokens_per_second"], 0)
            self.assertEqual(x["model_type"], "F32")
            self.assertEqual(x["repetitions"], 2)
            self.assertEqual((x["matmul_dtype"], x["attn_dtype"], x["kv_cache_type"]), ("f32", "f32", "f32"))
        # The table names the products and the KV cache type it ran with.
        r = infera("--matmul-dtype", "bf16", "bench", *SOURCES["gguf"][:2], "-p", "8", "-n", "2", "-r", "1",
                   "--kv-cache-type", "bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("matmul/attn/kv", r.stdout.decode())
        self.assertIn("| bf16/f32/bf16 ", r.stdout.decode())

    def test_bench_takes_llama_bench_lists_and_outputs(self):
        import csv
        import io
        import json
        m = SOURCES["gguf"][:2]
        # Lists (every -p, every -n, every -pg; each at every -d), jsonl: a
        # line per test with llama-bench's field names; its -mmp / --progress
        # are answered with a note.
        r = infera("bench", *m, "-p", "16,32", "-n", "4", "-pg", "8,4", "-d", "0,8", "-r", "2", "-o", "jsonl",
                   "-ctk", "q8_0", "-mmp", "0", "--progress")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual([x["test"] for x in rows], ["pp16", "pp32", "tg4", "pp8+tg4", "pp16 @ d8", "pp32 @ d8",
                                                     "tg4 @ d8", "pp8+tg4 @ d8"])
        want = [(16, 0, 0), (32, 0, 0), (0, 4, 0), (8, 4, 0), (16, 0, 8), (32, 0, 8), (0, 4, 8), (8, 4, 8)]
        self.assertEqual([(x["n_prompt"], x["n_gen"], x["n_depth"]) for x in rows], want)
        for x in rows:
            self.assertEqual(len(x["samples_ts"]), 2)
            self.assertEqual(len(x["samples_ns"]), 2)
            self.assertAlmostEqual(x["avg_ts"], sum(x["samples_ts"]) / 2, places=6)
            self.assertEqual(x["avg_ts"], x["tokens_per_second"])
            self.assertGreater(x["avg_ns"], 0)
            self.assertEqual((x["type_k"], x["type_v"], x["kv_cache_type"]), ("q8_0", "q8_0", "q8"))
            self.assertEqual(x["model_type"], "F32")
        err = r.stderr.decode()
        self.assertIn("ignoring -mmp 0", err)
        self.assertIn("ignoring --progress", err)
        # csv: a header and a row per test.
        r = infera("bench", *m, "-p", "8", "-n", "2,3", "-r", "1", "-o", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        table = list(csv.DictReader(io.StringIO(r.stdout.decode())))
        self.assertEqual([(x["test"], x["n_prompt"], x["n_gen"]) for x in table],
                         [("pp8", "8", "0"), ("tg2", "0", "2"), ("tg3", "0", "3")])
        for x in table:
            self.assertGreater(float(x["avg_ts"]), 0)
        for args, needle in ((["-o", "sql"], "md (a table), csv, json and jsonl"), (["-pg", "5"], "PROMPT,GEN"),
                             (["-p", "8,-1"], ">= 0"), (["--parallel", "1,2", "-p", "8,16"], "one -p")):
            r = infera("bench", *m, "-r", "1", *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertEqual(r.stdout, b"", args)
            lines = r.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (args, lines))
            self.assertIn(needle, lines[0], args)

    def test_convert_llama2c_to_gguf_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "s.gguf")
            r = infera("convert", os.path.join(DIR, "stories260K.bin"), out, "--tokenizer", os.path.join(DIR, "tok512.bin"))
            self.assertEqual(r.returncode, 0, r.stderr)
            r = infera("run", "--model", out, "-p", "Zoo", "-n", "57", "--temp", "0")
            self.assertEqual(r.stdout.decode().rstrip("\n"), expected("D"))
            f16 = os.path.join(d, "s16.gguf")
            r = infera("convert", out, f16, "--outtype", "f16")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = infera("run", "--model", f16, "-p", "Zoo", "-n", "10", "--temp", "0")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.decode().startswith("Zoo"))


if __name__ == "__main__":
    unittest.main()
