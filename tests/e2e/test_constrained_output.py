"""Constrained output through the server (sampling/grammar_constraint.h):
every output of a json_object request that ends by itself parses as a JSON
object; guided_choice always returns one of the choices; a GBNF grammar's
outputs match it (streamed or not, n > 1, batched with unconstrained
requests); bad or conflicting constraints are 400 naming the field.
`infera run` takes llama-cli's flags for the same: --grammar, --grammar-file,
-j/--json-schema, -jf/--json-schema-file, in the chat too."""
import json
import os
import re
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import SANITIZED, Server, infera  # noqa: E402

CHAT = "/v1/chat/completions"


def chat(content, **kw):
    return dict({"messages": [{"role": "user", "content": content}]}, **kw)


class ConstrainedOutputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--max-num-seqs", "16")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_json_object_outputs_parse(self):
        ended = 0
        # (8 seeds under the sanitizers, common.SANITIZED: each reply runs to
        # 400 tokens there at a tenth of the speed.)
        for seed in range(8 if SANITIZED else 24):
            # Small objects: a low temperature keeps the Bible model from
            # writing whole chapters inside a string.
            st, b = self.srv.json("POST", CHAT, chat("Reply in JSON.", response_format={"type": "json_object"},
                                                     max_tokens=400, seed=seed, temperature=0.3))
            self.assertEqual(st, 200, b)
            c = b["choices"][0]
            text = c["message"]["content"]
            self.assertTrue(text.startswith("{"), text)
            if c["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(text), dict, text)
                ended += 1
        self.assertGreater(ended, 0)

    def test_guided_choice(self):
        choices = ["In the beginning", "Amen", "Selah", "Hallelujah"]
        seen = set()
        for seed in range(16):
            st, b = self.srv.json("POST", "/v1/completions",
                                  {"prompt": "The word is", "guided_choice": choices, "seed": seed, "max_tokens": 30})
            self.assertEqual(st, 200, b)
            self.assertIn(b["choices"][0]["text"], choices)
            self.assertEqual(b["choices"][0]["finish_reason"], "stop")
            seen.add(b["choices"][0]["text"])
        self.assertGreater(len(seen), 1)

    def test_grammar_streamed_n_and_batched(self):
        grammar = r'''
root ::= item ("; " item){2,4} "."
item ::= [A-Z] [a-z]{1,8} " " [0-9]{1,3}
'''
        pattern = re.compile(r"[A-Z][a-z]{1,8} [0-9]{1,3}(; [A-Z][a-z]{1,8} [0-9]{1,3}){2,4}\.")
        results = {}

        def unconstrained():
            results["free"] = self.srv.json("POST", "/v1/completions",
                                            {"prompt": "In the beginning", "max_tokens": 64, "ignore_eos": True})
        t = threading.Thread(target=unconstrained)
        t.start()
        st, b = self.srv.json("POST", "/v1/completions", {"prompt": "Names and ages:", "grammar": grammar, "n": 4,
                                                          "seed": 3, "max_tokens": 200})
        self.assertEqual(st, 200, b)
        for c in b["choices"]:
            self.assertRegex(c["text"], pattern)
            self.assertEqual(c["finish_reason"], "stop")
        st, _, data = self.srv.request("POST", CHAT, chat("Names and ages", grammar=grammar, stream=True, seed=4,
                                                          max_tokens=200))
        self.assertEqual(st, 200)
        text = ""
        for line in data.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for ch in json.loads(line[6:])["choices"]:
                    text += ch["delta"].get("content") or ""
        self.assertRegex(text, pattern)
        t.join()
        self.assertEqual(results["free"][0], 200)
        self.assertEqual(results["free"][1]["usage"]["completion_tokens"], 64)
        self.assertEqual(self.srv.metric("infera_kv_blocks_used"), 0)

    def test_guided_regex_outputs_fullmatch(self):
        patterns = [r"^\d{3}-[A-Z]{2}(x|y)?$", r"[a-z]{1,8}@[a-z]{1,6}\.(com|org)", r"(?:Amen|Selah)[.!]{1,3}",
                    r"\w+( \w+){0,4}\.", r"[^\s,]{2,5}(, [^\s,]{2,5})*;", r"\(\d+\) [\u00e9a-c]{2}\\"]
        for pattern in patterns:
            for seed in range(4):
                st, b = self.srv.json("POST", "/v1/completions", {"prompt": "Code:", "guided_regex": pattern,
                                                                  "seed": seed, "max_tokens": 80})
                self.assertEqual(st, 200, (pattern, b))
                c = b["choices"][0]
                if c["finish_reason"] == "stop":
                    self.assertIsNotNone(re.fullmatch(pattern, c["text"]), (pattern, c["text"]))
                else:  # (unbounded repetitions may run to max_tokens)
                    self.assertTrue("*" in pattern or "+" in pattern, (pattern, c))
        for bad, needle in ((r"(a)\1", "back references"), (r"a(?=b)", "lookaround"), (r"a^b", "anchors"),
                            (r"[z-a]", "backwards"), (r"(ab", "expected ')'"), (r"*a", "nothing to repeat")):
            st, b = self.srv.json("POST", "/v1/completions", {"prompt": "x", "guided_regex": bad})
            self.assertEqual((st, b["error"]["param"]), (400, "guided_regex"), (bad, b))
            self.assertIn(needle, b["error"]["message"])

    def test_bad_constraints_are_400(self):
        cases = [({"grammar": "root ::= foo"}, "grammar"), ({"grammar": "root ::= root \"a\""}, "grammar"),
                 ({"guided_grammar": "x"}, "guided_grammar"), ({"guided_choice": "yes"}, "guided_choice"),
                 ({"guided_choice": ["a", ""]}, "guided_choice"), ({"grammar": 3}, "grammar"),
                 ({"grammar": "root ::= \"a\"", "guided_choice": ["b"]}, "guided_choice"),
                 ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "response_format"),
                 ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"pattern": "x"}}}}, "response_format")]
        for extra, param in cases:
            st, b = self.srv.json("POST", CHAT, chat("x", **extra))
            self.assertEqual(st, 400, (extra, b))
            self.assertEqual(b["error"]["param"], param, (extra, b))
        st, b = self.srv.json("POST", CHAT, chat("x", grammar="root ::= foo"))
        self.assertIn("never defined", b["error"]["message"])


YES_NO = 'root ::= "yes" | "no"'
# Bounded: every output the grammar allows fits in the -n below, so a
# generation ends by itself (finish: stop).
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "ok": {"type": "boolean"}},
          "required": ["name", "ok"]}


class RunFlagsTest(unittest.TestCase):
    def run_ok(self, *args, input=None):
        r = infera("run", "-p", "The answer is ", "--no-display-prompt", *args, input=input)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode().strip(), r.stderr.decode()

    def test_grammar(self):
        for seed in range(6):
            out, err = self.run_ok("--grammar", YES_NO, "-n", "16", "--temp", "1.5", "-s", str(seed))
            self.assertIn(out, ("yes", "no"))
            self.assertIn("finish: stop", err)
        with tempfile.TemporaryDirectory() as d:
            g = os.path.join(d, "yes_no.gbnf")
            with open(g, "w") as f:
                f.write("# a file\n" + YES_NO + "\n")
            self.assertEqual(self.run_ok("--grammar-file", g, "-s", "3", "--temp", "1.5")[0],
                             self.run_ok("--grammar", YES_NO, "-s", "3", "--temp", "1.5")[0])
        # In the chat, each reply.
        r = infera("run", "-i", "-n", "16", "--grammar", YES_NO, input=b"hello\nagain\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        replies = [l.strip("> ").strip() for l in r.stdout.decode().splitlines() if l.strip("> ").strip()]
        self.assertEqual(len(replies), 2, r.stdout)
        for reply in replies:
            self.assertIn(reply, ("yes", "no"))

    def test_json_schema(self):
        schema = json.dumps(SCHEMA)
        for seed in range(4):
            out, err = self.run_ok("-j", schema, "-n", "200", "--temp", "1.0", "-s", str(seed))
            self.assertIn("finish: stop", err)
            v = json.loads(out)
            self.assertEqual(set(v), {"name", "ok"}, out)
            self.assertIsInstance(v["name"], str)
            self.assertLessEqual(len(v["name"]), 12)
            self.assertIsInstance(v["ok"], bool)
        with tempfile.TemporaryDirectory() as d:
            f_ = os.path.join(d, "schema.json")
            with open(f_, "w") as f:
                f.write(schema)
            for spelling in ("-jf", "--json-schema-file"):
                self.assertEqual(self.run_ok(spelling, f_, "-n", "200", "-s", "1")[0],
                                 self.run_ok("--json-schema", schema, "-n", "200", "-s", "1")[0])
        # '{}': any JSON object, as in llama.cpp.
        out, err = self.run_ok("-j", "{}", "-n", "400", "--temp", "0.3", "-s", "2")
        if "finish: stop" in err:
            self.assertIsInstance(json.loads(out), dict)
        else:
            self.assertTrue(out.startswith("{"), out)

    def test_bad_constraints(self):
        for args, needle in [(["--grammar", YES_NO, "-j", "{}"], "both constrain"),
                             (["--grammar", "root ::= x"], "--grammar: grammar: rule 'x'"),
                             (["-j", "{bad"], "not valid JSON"),
                             (["-j", '{"type": "string", "pattern": "a+"}'], "'pattern'"),
                             (["-jf", "/nonexistent/s.json"], "--json-schema-file: /nonexistent"),
                             (["--grammar-file", "/nonexistent/g.gbnf"], "--grammar-file: /nonexistent")]:
            r = infera("run", "-p", "x", "-n", "4", *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertEqual(r.stdout, b"", args)
            lines = r.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (args, lines))
            self.assertIn(needle, lines[0], args)


if __name__ == "__main__":
    unittest.main()
