"""`infera eval`: the shipped KJV tasks and tasks built from the tinystories
fixture's held-out text by tools/py/make_eval_tasks.py, in every format
(the same tasks as JSONL and as llama.cpp's hellaswag text score the same),
a winogrande CSV, LAMBADA-style passages; batched scoring equals one-at-a-
time scoring; bad task files are refused with one line and exit 2;
llama-perplexity's --hellaswag / --winogrande / --multiple-choice score the
same."""
import json
import os
import subprocess
import tempfile
import unittest

from common import INFERA, REPO, SANITIZED, SHARED

KJV_EVAL = os.path.join(REPO, "models", "kjv-7m", "eval")
TS3M = os.path.join(SHARED, "models", "tinystories-3m")
# The sanitizer build (common.SANITIZED) scores the first tasks of each
# shipped or generated file only: its accuracy is the release run's to check.
SHIPPED_LIMIT = ("--limit", "40") if SANITIZED else ()
# Task counts of the equality checks (batched vs alone, the two spellings):
# halved there too; the code paths are the same at any count.
FLAGS_TASKS = "20" if SANITIZED else "40"
BATCH_TASKS = "30" if SANITIZED else "60"


def run_eval(*args):
    r = subprocess.run([INFERA, "--log-level", "warn", "eval", "--json", *args], capture_output=True, text=True)
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


def as_perplexity(*args):
    """llama-perplexity's spelling of a task score (--hellaswag, ...): the
    same scores as eval's (its timing left out)."""
    r = subprocess.run([INFERA, "--log-level", "warn", "perplexity", "--json", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    j.pop("seconds")
    return j


def without_seconds(j):
    return {k: v for k, v in j.items() if k != "seconds"}


class EvalTest(unittest.TestCase):
    def test_shipped_kjv_tasks(self):
        _, j1 = run_eval("-f", os.path.join(KJV_EVAL, "kjv-continuation.jsonl"), *SHIPPED_LIMIT)
        _, j2 = run_eval("-f", os.path.join(KJV_EVAL, "kjv-continuation.txt"), *SHIPPED_LIMIT)
        self.assertEqual(j1["format"], "jsonl")
        self.assertEqual(j2["format"], "hellaswag")
        self.assertEqual(j1["tasks"], 40 if SANITIZED else 300)
        for k in ("acc", "acc_norm"):
            self.assertEqual(j1[k], j2[k], k)
        # The context is computed once per task: the other endings reuse it.
        self.assertGreater(j1["cached_tokens"], 0.3 * j1["prompt_tokens"])
        _, lam = run_eval("-f", os.path.join(KJV_EVAL, "kjv-lambada.txt"), *SHIPPED_LIMIT)
        self.assertEqual(lam["format"], "lambada")
        if not SANITIZED:
            # Four endings: chance is 25 %; the model knows its Bible.
            self.assertGreater(j1["acc_norm"], 0.45)
            self.assertGreater(lam["acc"], 0.15)

    def test_llama_perplexity_hellaswag_flags(self):
        f = os.path.join(KJV_EVAL, "kjv-continuation.txt")
        _, j = run_eval("-f", f, "--format", "hellaswag", "--limit", FLAGS_TASKS)
        self.assertEqual(as_perplexity("-f", f, "--hellaswag", "--hellaswag-tasks", FLAGS_TASKS), without_seconds(j))
        for args, needle in ((["--hellaswag", "--winogrande"], "give one"),
                             (["--hellaswag", "--kl-divergence"], "does not combine"),
                             (["--hellaswag", "--hellaswag-tasks", "-1"], ">= 0")):
            r = subprocess.run([INFERA, "perplexity", "-f", f, *args], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, (args, lines))
            self.assertIn(needle, lines[0], args)

    def test_batched_equals_one_at_a_time(self):
        f = os.path.join(KJV_EVAL, "kjv-continuation.jsonl")
        _, batched = run_eval("-f", f, "--limit", BATCH_TASKS)
        _, single = run_eval("-f", f, "--limit", BATCH_TASKS, "--parallel", "1")
        for k in ("tasks", "acc", "acc_norm"):
            self.assertEqual(batched[k], single[k], k)

    @unittest.skipUnless(os.path.exists(TS3M), "../shared not present")
    def test_tasks_from_the_tinystories_fixture(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "py", "make_eval_tasks.py"),
                            os.path.join(TS3M, "heldout.txt"), d, "ts", "--tasks", "120"], check=True,
                           capture_output=True)
            model = os.path.join(TS3M, "tinystories-3m-f32.gguf")
            r, j = run_eval("-m", model, "-f", os.path.join(d, "ts-continuation.jsonl"), *SHIPPED_LIMIT)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(j["tasks"], 40 if SANITIZED else 120)
            r, lam = run_eval("-m", model, "-f", os.path.join(d, "ts-lambada.txt"), *SHIPPED_LIMIT)
            self.assertEqual(r.returncode, 0, r.stderr)
            if not SANITIZED:
                self.assertGreater(j["acc_norm"], 0.33)  # chance: 0.25
                self.assertGreater(lam["acc"], 0.1)

    def test_winogrande_csv(self):
        rows = ["index,sentence,option1,option2,answer",
                '1,"And Moses said unto the people, _ shall fight for you.",the LORD,the sea,1',
                '2,"In the beginning God created the heaven and the _.",earth,people,1',
                '3,"And God said, Let _ be light: and there was light.",water,there,2']
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "w.csv")
            with open(p, "w") as f:
                f.write("\n".join(rows) + "\n")
            r, j = run_eval("-f", p)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual((j["format"], j["tasks"]), ("winogrande", 3))
            self.assertGreaterEqual(j["acc"], 2 / 3)
            self.assertEqual(as_perplexity("-f", p, "--winogrande"), without_seconds(j))
            _, j2 = run_eval("-f", p, "--limit", "2")
            self.assertEqual(as_perplexity("-f", p, "--winogrande", "--winogrande-tasks", "2"), without_seconds(j2))

    def test_llama_cpp_multiple_choice_binary(self):
        import struct

        def string(x):
            b = x.encode()
            return struct.pack("<I", len(b)) + b

        def answers(items, labels):
            return struct.pack("<I", len(items)) + b"".join(string(a) for a in items) + struct.pack(
                f"<{len(labels)}i", *labels)

        tasks = [("In the beginning God created the", ["heaven and the earth.", "sea and the dry land were sold."],
                  [1, 0]),
                 ("And God said, Let there be", ["a famine in the land.", "light: and there was light.",
                                                 "no more war."], [0, 1, 0]),
                 ("The LORD is my", ["shepherd; I shall not want.", "enemy and mine adversary."], [1, 0])]
        body = b"".join(string(q) + answers(a, lab) + answers(a[:1], [1]) for q, a, lab in tasks)
        blob = struct.pack("<I", len(tasks)) + struct.pack(f"<{len(tasks)}I", *([0] * len(tasks))) + body
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "mc.bin")
            with open(p, "wb") as f:
                f.write(blob)
            r, j = run_eval("-f", p)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual((j["format"], j["tasks"]), ("multiple-choice", 3))
            self.assertGreaterEqual(j["acc_norm"], 2 / 3)
            self.assertEqual(as_perplexity("-f", p, "--multiple-choice"), without_seconds(j))
            with open(p, "wb") as f:
                f.write(blob[:len(blob) - 7])
            r, _ = run_eval("-f", p)
            self.assertEqual(r.returncode, 2)
            self.assertIn("truncated", r.stderr)

    def test_bad_task_files(self):
        with tempfile.TemporaryDirectory() as d:
            cases = {"bad.jsonl": '{"ctx": "a", "endings": ["b"], "label": 0}\n',
                     "bad2.jsonl": "not json\n",
                     "bad.csv": "index,sentence,option1,option2,answer\n1,no blank here,a,b,1\n"}
            for name, body in cases.items():
                p = os.path.join(d, name)
                with open(p, "w") as f:
                    f.write(body)
                r, _ = run_eval("-f", p)
                self.assertEqual(r.returncode, 2, name)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            r, _ = run_eval("-f", os.path.join(KJV_EVAL, "kjv-lambada.txt"), "--format", "mmlu")
            self.assertEqual(r.returncode, 2)
            r, _ = run_eval("-f", os.path.join(d, "missing.jsonl"))
            self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
