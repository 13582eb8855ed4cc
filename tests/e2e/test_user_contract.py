"""Regression tests for what a first-time user found (issue 13, Stage 6b): no
command ever destroys an input file, fields and limits are honoured or refused
(never silently ignored), security defaults, exit codes, observability of the
HTTP layer's own errors, and the familiar CLI (help, defaults, llama.cpp and
vLLM spellings, stdin). Uses the bundled model, so nothing here skips."""
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import INFERA, REPO, Server, infera  # noqa: E402

MODEL = os.path.join(REPO, "models", "kjv-7m", "kjv-7m.gguf")
HF = os.path.join(REPO, "models", "kjv-7m", "hf")
TEXT = os.path.join(REPO, "models", "kjv-7m", "heldout.txt")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_error_line(test, r, needle=None, code=2):
    err = r.stderr.decode()
    test.assertEqual(r.returncode, code, err)
    lines = [l for l in err.splitlines() if l.startswith("infera: error:")]
    test.assertEqual(len(lines), 1, err)
    if needle:
        test.assertIn(needle, lines[0])
    return lines[0]


def with_context_length(src, dst, n_ctx):
    """Copies a GGUF, setting llama.context_length (a u32 value) to n_ctx."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    key = b"llama.context_length"
    at = data.find(key)
    assert at > 0
    type_at = at + len(key)
    assert struct.unpack_from("<I", data, type_at)[0] == 4  # GGUF u32
    struct.pack_into("<I", data, type_at + 4, n_ctx)
    with open(dst, "wb") as f:
        f.write(data)


class NeverDestroyInputTest(unittest.TestCase):
    """Every command that writes a file refuses an output that is, or links
    to, one of its inputs: one line, exit 2, the input byte for byte intact."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.model = os.path.join(self.dir, "m.gguf")
        shutil.copy(MODEL, self.model)
        self.text = os.path.join(self.dir, "t.txt")
        shutil.copy(TEXT, self.text)

    def tearDown(self):
        self.tmp.cleanup()

    def p(self, name):
        return os.path.join(self.dir, name)

    def assert_refused(self, *args, protected):
        before = {p: digest(p) for p in protected}
        r = infera(*args)
        one_error_line(self, r, needle="input")
        for p, d in before.items():
            self.assertEqual(digest(p), d, f"{args} changed {p}")

    def test_convert_and_quantize_onto_the_input(self):
        self.assert_refused("convert", self.model, self.model, protected=[self.model])
        os.symlink(self.model, self.p("link.gguf"))
        self.assert_refused("convert", self.model, self.p("link.gguf"), protected=[self.model])
        os.link(self.model, self.p("hard.gguf"))
        self.assert_refused("quantize", self.model, self.p("hard.gguf"), "--type", "q8_0", protected=[self.model])
        self.assert_refused("quantize", self.p("link.gguf"), self.model, "--type", "q4_0", protected=[self.model])

    def test_convert_into_the_input_folder(self):
        hf = self.p("hf")
        shutil.copytree(HF, hf)
        files = [os.path.join(hf, f) for f in os.listdir(hf)]
        weights = [f for f in files if f.endswith(".safetensors")][0]
        self.assert_refused("convert", hf, weights, protected=files)
        self.assert_refused("convert", hf, os.path.join(hf, "config.json"), protected=files)

    def test_perplexity_base_onto_model_or_text(self):
        self.assert_refused("perplexity", "-m", self.model, "-f", self.text, "--chunks", "1",
                            "--kl-divergence-base", self.model, protected=[self.model])
        self.assert_refused("perplexity", "-m", self.model, "-f", self.text, "--chunks", "1",
                            "--kl-divergence-base", self.text, protected=[self.text])

    def test_generate_eval_logits_dump_tensor(self):
        inp = self.p("in.jsonl")
        with open(inp, "w") as f:
            f.write(json.dumps({"prompt": "In the beginning", "max_tokens": 2}) + "\n")
        self.assert_refused("generate", "-m", self.model, "--input", inp, "--output", inp, protected=[inp])
        self.assert_refused("generate", "-m", self.model, "--input", inp, "--output", self.model,
                            protected=[self.model])
        self.assert_refused("eval-logits", "-m", self.model, "--tokens", "1 2 3", "--out", self.model,
                            protected=[self.model])
        self.assert_refused("dump-tensor", "-m", self.model, "--tensor", "output_norm.weight", "--out", self.model,
                            protected=[self.model])

    def test_outputs_replace_atomically_and_keep_links(self):
        # Writing through a link to a file that is not an input replaces the
        # file the link points to; the link stays a link; no temporary files
        # are left behind.
        target = self.p("target.gguf")
        with open(target, "wb") as f:
            f.write(b"old")
        os.symlink(target, self.p("out-link.gguf"))
        r = infera("convert", self.model, self.p("out-link.gguf"), "--outtype", "f32")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(self.p("out-link.gguf")))
        with open(target, "rb") as f:
            self.assertEqual(f.read(4), b"GGUF")
        leftovers = [n for n in os.listdir(self.dir) if ".tmp-" in n]
        self.assertEqual(leftovers, [])
        # A failed run leaves the previous output as it was.
        before = digest(target)
        r = infera("convert", "/nonexistent.gguf", target)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(digest(target), before)


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.short = os.path.join(cls.tmp.name, "short-ctx.gguf")
        with_context_length(MODEL, cls.short, 256)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_context_beyond_training_is_refused(self):
        m = self.short
        cases = [
            ("run", "-m", m, "-c", "512", "-p", "x", "-n", "1"),
            ("perplexity", "-m", m, "-f", TEXT, "--ctx", "512"),
            ("bench", "-m", m, "-p", "512", "-n", "1", "-r", "1"),
            ("bench", "-m", m, "--parallel", "1", "-p", "200", "-n", "100"),
            ("generate", "-m", m, "--input", TEXT, "--output", os.path.join(self.tmp.name, "o.jsonl"),
             "--max-model-len", "512"),
            ("serve", m, "--port", "0", "--max-model-len", "512"),
            ("serve", m, "--port", "0", "-c", "1000"),
        ]
        for args in cases:
            one_error_line(self, infera(*args), needle="trained context")

    def test_perplexity_default_ctx_fits_the_trained_context(self):
        r = infera("perplexity", "-m", self.short, "-f", TEXT, "--chunks", "1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["ctx"], 256)
        r = infera("perplexity", "-m", MODEL, "-f", TEXT, "--chunks", "1", "--json")
        self.assertEqual(json.loads(r.stdout)["ctx"], 512)

    def test_threads_above_the_cores_warn_and_cap(self):
        r = infera("run", "-m", MODEL, "-t", "512", "-p", "In the beginning", "-n", "4", "--temp", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("warning: -t 512 is more than the", r.stderr.decode())
        self.assertIn("In the beginning", r.stdout.decode())

    def test_detokenize_rejects_ids_outside_the_vocabulary(self):
        for ids in ("4294967297", "1 -1", "32000000", "1 99999999999999999999", "1 x"):
            r = infera("detokenize", "-m", MODEL, ids)
            one_error_line(self, r)
            self.assertEqual(r.stdout, b"")
        r = infera("detokenize", "-m", MODEL, "1 100")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_detokenize_file_decodes_each_line(self):
        with tempfile.TemporaryDirectory() as d:
            ids = os.path.join(d, "ids.txt")
            with open(ids, "w") as f:
                f.write("1 100\n\n200 300\n")
            one = [infera("detokenize", "-m", MODEL, x).stdout for x in ("1 100", "", "200 300")]
            r = infera("detokenize", "-m", MODEL, "--file", ids, "--split", "|")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, b"|".join(o[:-1] for o in one) + b"|")  # each without its newline
            r = infera("detokenize", "-m", MODEL, "--file", ids)
            self.assertEqual(r.stdout, b"".join(one))
            with open(ids, "a") as f:
                f.write("5 x\n")
            r = infera("detokenize", "-m", MODEL, "--file", ids)
            one_error_line(self, r)
            self.assertIn("line 4", r.stderr.decode())
            self.assertEqual(r.stdout, b"")  # nothing printed before the whole file is checked
            for args in (("1 2", "--file", ids), ()):  # both, or neither
                r = infera("detokenize", "-m", MODEL, *args)
                one_error_line(self, r)


class ExitCodesTest(unittest.TestCase):
    def test_failed_stdout_write_is_an_error(self):
        with open("/dev/full", "w") as full:
            for args in (("run", "-m", MODEL, "-p", "In the beginning", "-n", "8"),
                         ("tokenize", "-m", MODEL, "In the beginning")):
                r = subprocess.run([INFERA, *args], stdout=full, stderr=subprocess.PIPE, timeout=120)
                self.assertNotEqual(r.returncode, 0, args)
                self.assertIn(b"cannot write to standard output", r.stderr)

    def test_engine_option_errors_leave_stdout_empty(self):
        # Refused engine options (most before the model loads, a missing draft
        # model after it) leave stdout empty: the prompt is echoed only once
        # the engine exists.
        for extra in (("--draft-max", "0"), ("--spec", "bogus"), ("--draft-p-min", "2"),
                      ("--spec", "ngram", "--draft-min", "9", "--draft-max", "2"),
                      ("--draft-model", "/nonexistent/draft.gguf")):
            r = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "4", *extra)
            one_error_line(self, r)
            self.assertEqual(r.stdout, b"", extra)

    def test_bench_serve_fails_when_requests_fail(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
        s.close()
        r = infera("bench-serve", "--url", f"http://127.0.0.1:{dead}", "--num-prompts", "2", "--input-len", "4",
                   "--output-len", "2", timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("2 of 2 requests failed", r.stderr.decode())


class SecurityDefaultsTest(unittest.TestCase):
    def test_empty_or_double_api_key(self):
        one_error_line(self, infera("serve", "--port", "0", "--api-key", ""), needle="--api-key is empty")
        with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
            f.write("k\n")
            f.flush()
            one_error_line(self, infera("serve", "--port", "0", "--api-key", "k", "--api-key-file", f.name),
                           needle="both given")

    def test_help_names_every_guarded_route(self):
        r = infera("serve", "--help")
        text = " ".join(r.stdout.decode().split())
        for route in ("/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize",
                      "/admin/log-level"):
            self.assertIn(route, text)


class FamiliarCliTest(unittest.TestCase):
    def test_help_command_and_defaults(self):
        r = infera("help")
        self.assertEqual(r.returncode, 0)
        for cmd in ("run", "serve", "generate", "perplexity", "quantize"):
            self.assertIn(cmd, r.stdout.decode())
        r = infera("help", "serve")
        self.assertEqual(r.returncode, 0)
        out = r.stdout.decode()
        for shown in ("--port INT=8080", "--max-queue INT=256", "--kv-block-size,--block-size INT=16",
                      "--max-batched-tokens,--max-num-batched-tokens INT=512"):
            self.assertIn(shown, out)
        self.assertIn("--temp FLOAT=0.8", infera("run", "--help").stdout.decode())
        one_error_line(self, infera("help", "nope"), needle="no command 'nope'")

    def test_llama_cpp_flags(self):
        r = infera("run", "-m", MODEL, "-ngl", "99", "-fa", "on", "--mlock", "-p", "In the beginning", "-n", "3",
                   "--temp", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        err = r.stderr.decode()
        self.assertIn("note: infera computes every layer on the CPU", err)
        self.assertIn("ignoring -ngl 99", err)
        self.assertIn("ignoring -fa on", err)
        plain = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "3", "--temp", "0")
        self.assertEqual(r.stdout, plain.stdout)
        one_error_line(self, infera("run", "-hf", "org/model-GGUF"), needle="does not download models")
        # llama.cpp's cache types: one --kv-cache-type for K and V.
        q8 = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "8", "--temp", "0", "--kv-cache-type", "q8")
        for spelling in (["-ctk", "q8_0", "-ctv", "q8_0"], ["--cache-type-k=q8_0"], ["-ctv", "q8_0"]):
            r = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "8", "--temp", "0", *spelling)
            self.assertEqual(r.returncode, 0, (spelling, r.stderr))
            self.assertEqual(r.stdout, q8.stdout, spelling)
        self.assertNotEqual(q8.stdout, b"")
        one_error_line(self, infera("run", "-ctk", "f16", "-p", "x"), needle="f32, bf16")
        one_error_line(self, infera("run", "-ctk", "q4_0", "-p", "x"), needle="f32, bf16")
        one_error_line(self, infera("run", "-ctk", "q8_0", "-ctv", "bf16", "-p", "x"), needle="one type")
        # Flags for what infera does anyway, and llama.cpp samplers left off:
        # a note each, the same text.
        r = infera("run", "-m", MODEL, "-tb", "2", "-co", "-no-cnv", "--no-warmup", "--no-escape", "--mirostat", "0",
                   "--typical", "1.0", "--top-nsigma", "-1", "--dry-base", "1.75", "--xtc-probability=0",
                   "-p", "In the beginning", "-n", "3", "--temp", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)
        err = r.stderr.decode()
        for shown in ("-tb 2", "-co", "-no-cnv", "--no-warmup", "--no-escape", "--mirostat 0", "--typical 1.0",
                      "--top-nsigma -1", "--dry-base 1.75", "--xtc-probability 0"):
            self.assertIn("ignoring " + shown + "\n", err)
        for args, needle in ((["--mirostat", "2"], "no mirostat sampler"), (["--typical", "0.9"], "locally typical"),
                             (["--dry-multiplier", "0.8"], "no DRY sampler"), (["--xtc-probability"], "needs a value")):
            one_error_line(self, infera("run", "-p", "x", *args), needle=needle)
        # -e processes escapes in the prompt and stop strings, as llama-cli does by default; -r / --reverse-prompt
        # is a stop string; -v is --log-level debug.
        escaped = infera("run", "-m", MODEL, "-e", "-p", "In the\\nbeginning\\x21", "-n", "2", "--temp", "0")
        self.assertEqual(escaped.returncode, 0, escaped.stderr)
        self.assertTrue(escaped.stdout.startswith(b"In the\nbeginning!"), escaped.stdout)
        literal = infera("run", "-m", MODEL, "-p", "In the\\nbeginning", "-n", "2", "--temp", "0")
        self.assertTrue(literal.stdout.startswith(b"In the\\nbeginning"), literal.stdout)
        words = plain.stdout.decode().split()
        r = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "3", "--temp", "0", "-r", words[-1])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("finish: stop", r.stderr.decode())
        self.assertNotIn(words[-1].encode(), r.stdout[len(b"In the beginning"):])
        self.assertIn(b"[I] model:", infera("run", "-m", MODEL, "-v", "-p", "x", "-n", "1").stderr)
        # --keep is run's --context-keep (quantize keeps its own --keep: test_quantize.py); --log-disable is
        # --log-level off.
        r = infera("run", "-m", MODEL, "--context-shift", "--keep", "4", "--log-disable", "-p", "In the beginning",
                   "-n", "3", "--temp", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)
        one_error_line(self, infera("run", "--keep", "-1", "-p", "x"), needle="--context-keep")
        # A command's own option of a foreign flag's name keeps its meaning
        # (bench-serve --timeout is not serve's -to / --timeout).
        r = infera("bench-serve", "--url", "http://127.0.0.1:1", "--timeout", "5", "--num-prompts", "1")
        self.assertNotIn("--read-timeout", r.stderr.decode())
        self.assertIn("requests failed", r.stderr.decode())
        # llama-server's and vLLM's names for serve's options.
        with Server("-m", MODEL, "-a", "kjv", "--metrics", "--no-webui", "-to", "45", "--threads-http", "2",
                    "--disable-log-requests", "--gpu-memory-utilization", "0.9", "-ctk", "q8_0", "--enforce-eager",
                    "--swap-space", "4") as srv:
            st, body = srv.json("GET", "/v1/models")
            self.assertEqual(st, 200, body)
            self.assertEqual([m["id"] for m in body["data"]], ["kjv"])
            self.assertEqual(srv.request("GET", "/")[0], 404)  # no web chat page
            st, body = srv.json("POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 8,
                                                            "temperature": 0})
            self.assertEqual(st, 200, body)
            self.assertEqual(body["choices"][0]["text"].encode(), q8.stdout[len(b"In the beginning"):-1])
            log = "".join(srv.log)
            for shown in ("--metrics", "--gpu-memory-utilization 0.9", "--enforce-eager", "--swap-space 4"):
                self.assertIn("ignoring " + shown, log)
        # llama.cpp's --lora loads an adapter: a missing one is one error line naming it.
        one_error_line(self, infera("serve", "--lora", "adapter.gguf"), needle="adapter.gguf")
        # vLLM's --kv-cache-dtype: auto is the default, bfloat16 is bf16, fp8 has no infera form.
        one_error_line(self, infera("serve", "--kv-cache-dtype", "fp8"), needle="q8 (int8")
        bf = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "8", "--temp", "0", "--kv-cache-type", "bf16")
        r = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "8", "--temp", "0", "--kv-cache-dtype", "bfloat16")
        self.assertEqual((r.returncode, r.stdout), (0, bf.stdout), r.stderr)
        kv_line = [l for l in bf.stderr.decode().splitlines() if "KV cache" in l]
        self.assertEqual(len(kv_line), 1, bf.stderr)
        self.assertIn(kv_line[0], r.stderr.decode())  # half the f32 cache's MiB
        # -sys becomes --system; -np becomes --parallel (serve only).
        r = infera("generate", "-np", "2", "--input", TEXT, "--output", "/dev/null")
        self.assertEqual(r.returncode, 2)

    def test_dash_reads_stdin(self):
        a = infera("run", "-m", MODEL, "-f", "-", "-n", "4", "--temp", "0", input=b"In the beginning")
        b = infera("run", "-m", MODEL, "-p", "In the beginning", "-n", "4", "--temp", "0")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(a.stdout, b.stdout)
        with open(TEXT, "rb") as f:
            text = f.read()
        a = infera("perplexity", "-m", MODEL, "-f", "-", "--chunks", "1", "--json", input=text)
        b = infera("perplexity", "-m", MODEL, "-f", TEXT, "--chunks", "1", "--json")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(json.loads(a.stdout)["ppl"], json.loads(b.stdout)["ppl"])
        line = json.dumps({"prompt": "In the beginning", "max_tokens": 2, "temperature": 0})
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.jsonl")
            r = infera("generate", "-m", MODEL, "--input", "-", "--output", out, input=line.encode() + b"\n")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                self.assertEqual(len(f.readlines()), 1)


class GenerateFieldsTest(unittest.TestCase):
    def run_lines(self, lines):
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                f.write("\n".join(json.dumps(l) for l in lines) + "\n")
            # (-i / -o: vLLM run_batch's spellings.)
            r = infera("generate", "-m", MODEL, "-i", inp, "-o", out, "-t", "2")
            results = None
            if r.returncode == 0:
                with open(out) as f:
                    results = [json.loads(l) for l in f]
            else:
                self.assertFalse(os.path.exists(out))
            return r, results

    def test_openai_batch_api_lines(self):
        """OpenAI Batch API lines ({"custom_id", "method", "url", "body"}, as
        vLLM's run_batch reads them) beside plain ones: each answered in its
        own shape, the batch ones with the server's completion objects."""
        msgs = [{"role": "user", "content": "Who made the light?"}]
        chat = {"messages": msgs, "max_tokens": 6, "temperature": 0}
        comp = {"prompt": "In the beginning", "max_tokens": 30, "temperature": 0}
        r, plain = self.run_lines([chat, comp])
        self.assertEqual(r.returncode, 0, r.stderr)
        word = plain[1]["text"].split()[1]
        r, res = self.run_lines([
            {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat},
            comp,
            {"custom_id": "b", "url": "/v1/completions", "body": dict(comp, model="kjv", stop=[word])}])
        self.assertEqual(r.returncode, 0, r.stderr)
        a, mid, b = res
        self.assertEqual((a["custom_id"], a["error"], a["response"]["status_code"]), ("a", None, 200))
        body = a["response"]["body"]
        self.assertEqual(body["object"], "chat.completion")
        self.assertEqual(body["choices"][0]["message"]["content"], plain[0]["text"])
        self.assertEqual((body["choices"][0]["finish_reason"], body["choices"][0]["stop_reason"]), ("length", None))
        self.assertEqual(body["usage"]["completion_tokens"], 6)
        self.assertEqual(mid["text"], plain[1]["text"])  # a plain line keeps generate's own shape
        body = b["response"]["body"]
        self.assertEqual((body["object"], body["model"]), ("text_completion", "kjv"))
        c = body["choices"][0]
        self.assertEqual((c["finish_reason"], c["stop_reason"]), ("stop", word))
        self.assertTrue(plain[1]["text"].startswith(c["text"] + word), (c["text"], word))
        for line, needle in (({"custom_id": "x", "url": "/v1/embeddings", "body": {"input": "a"}}, "not served"),
                             ({"custom_id": "x", "method": "GET", "url": "/v1/completions", "body": comp}, "POST"),
                             ({"custom_id": "x", "url": "/v1/chat/completions", "body": comp}, "needs 'messages'"),
                             ({"custom_id": "x", "url": "/v1/completions", "body": comp, "extra": 1}, "'extra'"),
                             ({"custom_id": "x", "url": "/v1/completions", "body": dict(comp, max_token=3)},
                              "body: unknown field 'max_token'")):
            r, res = self.run_lines([comp, line])
            self.assertEqual(r.returncode, 2, (line, r.stderr))
            self.assertIsNone(res)
            errors = [l for l in r.stderr.decode().splitlines() if l.startswith("infera: error:")]
            self.assertEqual(len(errors), 1, r.stderr)
            self.assertIn("line 2", errors[0])
            self.assertIn(needle, errors[0])

    def test_n_is_honoured(self):
        r, res = self.run_lines([{"prompt": "In the beginning", "max_tokens": 6, "n": 3, "seed": 7,
                                  "temperature": 1.0, "ignore_eos": True, "custom_id": "a"},
                                 {"prompt": "And God said", "max_tokens": 4, "temperature": 0}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(res[0]["choices"]), 3)
        self.assertEqual([c["index"] for c in res[0]["choices"]], [0, 1, 2])
        self.assertEqual(res[0]["usage"]["completion_tokens"], 18)
        self.assertEqual(res[0]["custom_id"], "a")
        self.assertEqual(res[0]["text"], res[0]["choices"][0]["text"])
        self.assertGreater(len({c["text"] for c in res[0]["choices"]}), 1)
        self.assertEqual(len(res[1]["choices"]), 1)
        # Reproducible with the seed.
        _, again = self.run_lines([{"prompt": "In the beginning", "max_tokens": 6, "n": 3, "seed": 7,
                                    "temperature": 1.0, "ignore_eos": True}])
        self.assertEqual([c["text"] for c in again[0]["choices"]], [c["text"] for c in res[0]["choices"]])

    def test_unsupported_or_unknown_fields_are_refused(self):
        for extra, needle in (({"grammar": "root ::= b"}, "'grammar'"), ({"json_schema": {"pattern": "x"}},
                              "'pattern'"), ({"best_of": 3}, "unknown field 'best_of'"),
                              ({"max_token": 3}, "unknown field 'max_token'"), ({"n": 0}, "'n'")):
            r, _ = self.run_lines([dict({"prompt": "x", "max_tokens": 2}, **extra)])
            one_error_line(self, r, needle=needle)
        r, res = self.run_lines([{"prompt": "x", "n_predict": 3, "ignore_eos": True, "grammar": ""}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(res[0]["usage"]["completion_tokens"], 3)
        # Constraints work offline too.
        r, res = self.run_lines([{"prompt": "x", "max_tokens": 20, "guided_choice": ["Amen", "Selah"]},
                                 {"prompt": "y", "max_tokens": 20, "grammar": "root ::= [0-9]{3}"}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(res[0]["text"], ["Amen", "Selah"])
        self.assertRegex(res[1]["text"], r"^[0-9]{3}$")


class ServerContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The model as a positional argument, llama.cpp's and vLLM's names.
        cls.srv = Server(MODEL, "-np", "3", "-c", "512", "--block-size", "8", "--max-num-batched-tokens", "128",
                         "--enable-prefix-caching", "--kv-cache-mb", "2", "--max-body-bytes", "4096")

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def complete(self, body, path="/v1/completions"):
        return self.srv.json("POST", path, body)

    def test_positional_model_and_aliases(self):
        st, body = self.srv.json("GET", "/v1/models")
        self.assertEqual(body["data"][0]["id"], "kjv-7m")
        log = "".join(self.srv.log)
        self.assertIn("context 512, max 3 seqs, 128 tokens/step", log)
        self.assertIn("blocks of 8 tokens", log)
        st, body = self.complete({"prompt": "In the beginning", "max_tokens": 600})
        self.assertEqual(st, 400)
        self.assertEqual(body["error"]["code"], "context_length_exceeded")

    def test_fields_that_change_the_output_are_refused(self):
        cases = [("json_schema", {"type": "string", "pattern": "^a"}),
                 ("guided_json", {"type": "integer", "multipleOf": 3}), ("guided_regex", "a(?=b)"),
                 ("best_of", 3), ("suffix", "the end"),
                 ("response_format", {"type": "json_schema", "json_schema": {"name": "x",
                                                                              "schema": {"not": {}}}}),
                 ("use_beam_search", True), ("mirostat", 2), ("typical_p", 0.5)]
        for field, value in cases:
            for path in ("/v1/completions", "/v1/chat/completions"):
                if field == "suffix" and path.endswith("chat/completions"):
                    continue
                body = {"max_tokens": 2, field: value}
                if path.endswith("chat/completions"):
                    body["messages"] = [{"role": "user", "content": "hi"}]
                else:
                    body["prompt"] = "In the beginning"
                st, b = self.complete(body, path)
                self.assertEqual(st, 400, (field, path, b))
                self.assertEqual(b["error"]["param"], field, b)
        # The legacy function-calling fields (tools replaced them) are refused.
        st, b = self.complete({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                               "functions": [{"name": "f"}]},
                              "/v1/chat/completions")
        self.assertEqual((st, b["error"]["param"]), (400, "functions"))
        # Their no-op values are accepted.
        st, b = self.complete({"prompt": "In the beginning", "max_tokens": 2, "grammar": "", "best_of": 1,
                               "suffix": None, "skip_special_tokens": True, "response_format": {"type": "text"}})
        self.assertEqual(st, 200, b)
        st, b = self.complete({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tools": [],
                               "tool_choice": "none", "store": False, "functions": []}, "/v1/chat/completions")
        self.assertEqual(st, 200, b)
        # A field no API defines (here a typo) is refused, not dropped.
        st, b = self.complete({"prompt": "In the beginning", "max_token": 2})
        self.assertEqual((st, b["error"]["param"]), (400, "max_token"), b)

    def test_n_predict_is_max_tokens(self):
        st, b = self.complete({"prompt": "In the beginning", "n_predict": 5, "ignore_eos": True})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["usage"]["completion_tokens"], 5)

    def test_kv_capacity_error_has_a_code(self):
        # 2 MiB of KV holds fewer tokens than the 512-token context.
        st, b = self.complete({"prompt": "In the beginning", "max_tokens": 500})
        self.assertEqual(st, 400, b)
        self.assertEqual(b["error"]["code"], "kv_cache_capacity_exceeded")
        self.assertEqual(b["error"]["param"], "prompt")

    def http_metric(self, endpoint, status):
        return self.srv.metric(f'infera_http_requests_total{{endpoint="{endpoint}",status="{status}"}}') \
            if self.has_metric(endpoint, status) else 0.0

    def has_metric(self, endpoint, status):
        _, _, data = self.srv.request("GET", "/metrics")
        return f'infera_http_requests_total{{endpoint="{endpoint}",status="{status}"}}' in data.decode()

    def test_http_layer_errors_are_counted_and_logged(self):
        before_413 = self.http_metric("/v1/completions", 413)
        st, _, data = self.srv.request("POST", "/v1/completions", b'{"prompt": "' + b"a" * 8192 + b'"}')
        self.assertEqual(st, 413)
        before_400 = self.http_metric("other", 400)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"GARBAGE\x01 / HTTP/1.1\r\n\r\n")
        reply = s.recv(4096)
        s.close()
        self.assertIn(b" 400 ", reply.split(b"\r\n")[0])
        deadline = time.time() + 5
        while time.time() < deadline and self.http_metric("other", 400) < before_400 + 1:
            time.sleep(0.05)
        self.assertEqual(self.http_metric("/v1/completions", 413), before_413 + 1)
        self.assertEqual(self.http_metric("other", 400), before_400 + 1)
        log = "".join(self.srv.log)
        self.assertIn('"status":413', log)
        self.assertIn("malformed HTTP request", log)


if __name__ == "__main__":
    unittest.main()
