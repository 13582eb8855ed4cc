"""`infera generate`: offline batch generation through the serving engine, on
the bundled demo model. Outputs come back in input order, greedy outputs equal
`infera run`'s, sampling with a seed is reproducible, and bad input is refused
with one line on stderr and exit code 2 before anything is generated."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import infera  # noqa: E402


def run_generate(lines, *extra):
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = infera("generate", "--input", inp, "--output", out, "-t", "2", *extra)
        results = None
        if r.returncode == 0:
            with open(out) as f:
                results = [json.loads(line) for line in f]
        return r, results


class GenerateTest(unittest.TestCase):
    def test_order_usage_and_greedy_equals_run(self):
        prompts = ["In the beginning", "And the LORD said unto Moses", "Blessed are", "The earth"]
        lines = [json.dumps({"prompt": p, "max_tokens": 8 + 3 * i, "temperature": 0}) for i, p in enumerate(prompts)]
        lines.append(json.dumps({"messages": [{"role": "user", "content": "Who made the heaven?"}], "max_tokens": 6,
                                 "temperature": 0.8, "seed": 11}))
        r, res = run_generate(lines, "--max-batched-tokens", "7", "--max-num-seqs", "3")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"requests in", r.stderr)
        self.assertEqual([x["index"] for x in res], list(range(5)))
        for i, p in enumerate(prompts):
            self.assertEqual(res[i]["finish_reason"], "length")
            self.assertEqual(res[i]["usage"]["completion_tokens"], 8 + 3 * i)
            self.assertIn("cached_tokens", res[i]["usage"]["prompt_tokens_details"])
            one = infera("run", "-p", p, "-n", str(8 + 3 * i), "--temp", "0", "-t", "2")
            self.assertEqual(one.returncode, 0)
            self.assertEqual(p + res[i]["text"], one.stdout.decode().strip("\n"), p)
        # The same seed gives the same sample, alone or in a batch.
        r2, res2 = run_generate([lines[-1]])
        self.assertEqual(res2[0]["text"], res[4]["text"])

    def test_stop_and_prefix_cache(self):
        base = {"prompt": "In the beginning God created the heaven and the earth. " * 8, "max_tokens": 12,
                "temperature": 0}
        lines = [json.dumps(base), json.dumps(dict(base, stop=["LORD"]))]
        r, res = run_generate(lines, "--max-num-seqs", "1")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertNotIn("LORD", res[1]["text"])
        # The second request reuses the first one's full blocks.
        self.assertGreater(res[1]["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        r, res = run_generate(lines, "--max-num-seqs", "1", "--no-prefix-cache")
        self.assertEqual(res[1]["usage"]["prompt_tokens_details"]["cached_tokens"], 0)

    def test_bad_input_is_refused(self):
        for bad in ["{not json", json.dumps({"max_tokens": 3}), json.dumps({"prompt": 5}),
                    json.dumps({"prompt": "x", "max_tokens": -2}), json.dumps({"prompt": "x", "temperature": "hot"}),
                    json.dumps({"prompt": "x", "max_tokens": 10 ** 7})]:
            r, _ = run_generate([json.dumps({"prompt": "ok", "max_tokens": 2}), bad])
            self.assertEqual(r.returncode, 2, bad)
            err = r.stderr.decode().strip().splitlines()
            self.assertTrue(err and "line 2" in err[-1], (bad, err))
        r = infera("generate", "--input", "/nonexistent.jsonl", "--output", "/tmp/x.jsonl")
        self.assertEqual(r.returncode, 2)
        r, _ = run_generate([json.dumps({"prompt": "x"})], "--admission", "sometimes")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
