"""LoRA adapters on the server, over the bundled model with random adapters:
llama-server's /lora-adapters and per-request 'lora' scales, vLLM's
--lora-modules (a request's model names an adapter; /v1/models lists it),
each request's output equal to the same adapter setting run alone by
`infera eval-logits --greedy` (also when requests with different adapters
share a batch), and the prefix cache keeping each setting's K/V apart;
vLLM's runtime loading (/v1/load_lora_adapter, /v1/unload_lora_adapter):
a loaded adapter serves as its name, one unloaded mid-stream finishes that
stream with it and frees its slot after, a name reloaded with another file
never meets the old file's cached K/V, and every misuse is one error.
(tests/reference/test_lora.py checks the numbers against merged weights.)"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "py"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
from common import INFERA, REPO, Server  # noqa: E402
import gguf_model  # noqa: E402
import model_files as mf  # noqa: E402

MODEL = os.path.join(REPO, "models", "default.gguf")
TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_random_adapter(path, seed, targets, rank=8, alpha=16.0, strength=1.0):
    """A LoRA adapter for the bundled model, strong enough to change greedy text."""
    meta, tensors = gguf_model.read_gguf(MODEL)
    arch = meta["general.architecture"]
    n_layer = meta[arch + ".block_count"]
    rng = np.random.default_rng(seed)
    T = []
    for l in range(n_layer):
        for t in targets:
            n_out, n_in = tensors[f"blk.{l}.{t}.weight"][1]
            a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(np.float32)
            b = (rng.standard_normal((n_out, rank)) * strength / np.sqrt(rank)).astype(np.float32)
            T += [(f"blk.{l}.{t}.weight.lora_a", a, mf.GGML_F16), (f"blk.{l}.{t}.weight.lora_b", b, mf.GGML_F16)]
    mf.write_gguf(path, [("general.architecture", "str", arch), ("general.type", "str", "adapter"),
                         ("adapter.type", "str", "lora"), ("adapter.lora.alpha", "f32", alpha)], T)


def write_test_adapters(folder):
    """The two adapters these tests (and the Python API's) use: one on every
    target matrix, one on q, v and down at another rank and alpha. Returns
    their paths."""
    a, b = os.path.join(folder, "psalms.gguf"), os.path.join(folder, "style.gguf")
    write_random_adapter(a, 1, TARGETS)
    write_random_adapter(b, 2, ("attn_q", "attn_v", "ffn_down"), rank=4, alpha=4.0, strength=2.0)
    return a, b


def greedy_alone(prompt_ids, *lora_args, n=16):
    """Greedy ids after prompt_ids on the bundled model with this adapter
    setting, computed alone by `infera eval-logits`."""
    r = subprocess.run([INFERA, "--log-level", "warn", "eval-logits", "-m", MODEL, "--tokens",
                        " ".join(map(str, prompt_ids)), "--greedy", str(n), *lora_args],
                       capture_output=True, text=True, check=True)
    return [int(t) for t in r.stdout.split()]


PROMPT = "In the beginning God created"


class LoraServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.a, cls.b = write_test_adapters(cls.tmp.name)
        cls.srv = Server("--lora", cls.a, "--lora-modules", f"style={cls.b}", "--max-num-seqs", "8")
        st, body = cls.srv.json("POST", "/tokenize", {"content": PROMPT})
        assert st == 200, body
        cls.prompt_ids = body["tokens"]
        cls.greedy = {}

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.tmp.cleanup()

    def alone(self, *lora_args, n=16):
        """Greedy ids after the prompt with this adapter setting, computed alone."""
        if lora_args not in self.greedy:
            self.greedy[lora_args] = greedy_alone(self.prompt_ids, *lora_args, n=n)
        return self.greedy[lora_args]

    def complete(self, n=16, **extra):
        st, body = self.srv.json("POST", "/completion", {"prompt": self.prompt_ids, "n_predict": n,
                                                         "temperature": 0, "return_tokens": True,
                                                         "ignore_eos": True, **extra})
        self.assertEqual(st, 200, body)
        return body["tokens"]

    def test_listing_and_models(self):
        st, body = self.srv.json("GET", "/lora-adapters")
        self.assertEqual(st, 200, body)
        self.assertEqual([(e["id"], e["name"], e["scale"]) for e in body], [(0, "psalms", 1.0), (1, "style", 0.0)])
        self.assertEqual(body[0]["path"], self.a)
        st, models = self.srv.json("GET", "/v1/models")
        ids = [m["id"] for m in models["data"]]
        self.assertEqual(ids[1:], ["psalms", "style"])
        self.assertEqual(models["data"][2]["parent"], ids[0])
        self.assertEqual(self.srv.json("GET", "/v1/models/style")[0], 200)
        self.assertTrue(any("LoRA adapter 1 'style'" in line for line in self.srv.log), "".join(self.srv.log[-20:]))

    def test_info_describes_an_adapter(self):
        r = subprocess.run([INFERA, "info", self.a], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for line in ("a lora adapter, not a model", "alpha:             16", "layers updated:    6",
                     "ranks:             8 (42 matrices)", "tensor types:      f16 (84 tensors)"):
            self.assertIn(line, r.stdout)
        self.assertIn("ffn_down (6 layers)", r.stdout)

    def test_each_setting_equals_the_same_setting_alone(self):
        base = self.alone()
        with_a = self.alone("--lora", self.a)
        with_b = self.alone("--lora", self.b)
        half_b = self.alone("--lora-scaled", f"{self.b}:0.5")
        self.assertNotEqual(base, with_a)
        self.assertNotEqual(base, with_b)
        self.assertEqual(self.complete(), with_a)  # the server's scales: psalms at 1
        self.assertEqual(self.complete(lora=[]), base)  # every adapter off for this request
        self.assertEqual(self.complete(lora=[{"id": 1, "scale": 0.5}]), half_b)
        self.assertEqual(self.complete(model="style"), with_b)  # vLLM: the named adapter alone
        # The OpenAI endpoints take the same selection.
        st, body = self.srv.json("POST", "/v1/completions", {"model": "style", "prompt": PROMPT, "max_tokens": 16,
                                                             "temperature": 0, "ignore_eos": True})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["model"], "style")  # answered as the adapter's model
        st, native = self.srv.json("POST", "/completion", {"model": "style", "prompt": PROMPT, "n_predict": 16,
                                                           "temperature": 0, "ignore_eos": True})
        self.assertEqual(body["choices"][0]["text"], native["content"])
        st, plain = self.srv.json("POST", "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0,
                                                          "ignore_eos": True, "lora": []})
        self.assertNotEqual(plain["content"], native["content"])

    def test_batched_requests_with_different_adapters(self):
        settings = [dict(), dict(lora=[]), dict(model="style"), dict(lora=[{"id": 1, "scale": 0.5}])] * 2
        want = [self.alone("--lora", self.a), self.alone(), self.alone("--lora", self.b),
                self.alone("--lora-scaled", f"{self.b}:0.5")] * 2
        got = [None] * len(settings)

        def run(i):
            got[i] = self.complete(**settings[i])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(settings))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(got, want)

    def test_prefix_cache_keeps_settings_apart(self):
        long_prompt = PROMPT + ", and the heaven and the earth were made, and all the host of them." * 3

        def go(**extra):
            st, body = self.srv.json("POST", "/v1/completions", {"prompt": long_prompt, "max_tokens": 6,
                                                                 "temperature": 0, **extra})
            self.assertEqual(st, 200, body)
            return body["choices"][0]["text"], body["usage"]["prompt_tokens_details"]["cached_tokens"]
        text_b, _ = go(model="style")
        text_b2, cached_b = go(model="style")
        self.assertEqual(text_b, text_b2)
        self.assertGreater(cached_b, 0)  # the same setting reuses its blocks
        text_base, _ = go(lora=[])
        text_base2, cached_base = go(lora=[])
        self.assertEqual(text_base, text_base2)
        self.assertNotEqual(text_base, text_b)

    def test_global_scales_and_errors(self):
        try:
            st, body = self.srv.json("POST", "/lora-adapters", [{"id": 1, "scale": 0.5}])
            self.assertEqual((st, body), (200, {"success": True}))
            st, body = self.srv.json("GET", "/lora-adapters")
            self.assertEqual([e["scale"] for e in body], [0.0, 0.5])  # psalms not named: off
            self.assertEqual(self.complete(), self.alone("--lora-scaled", f"{self.b}:0.5"))
        finally:
            self.srv.json("POST", "/lora-adapters", [{"id": 0, "scale": 1.0}])
        for bad in ([{"id": 2, "scale": 1}], [{"scale": 1}], [{"id": 0, "scale": "x"}], {"id": 0}):
            st, body = self.srv.json("POST", "/lora-adapters", bad)
            self.assertEqual(st, 400, (bad, body))
        st, body = self.srv.json("POST", "/completion", {"prompt": "x", "n_predict": 1, "lora": [{"id": 5}]})
        self.assertEqual(st, 400, body)
        self.assertEqual(body["error"]["param"], "lora")
        st, body = self.srv.json("POST", "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 1})
        self.assertEqual(st, 404, body)
        # Runtime loading is off without --max-runtime-loras.
        st, body = self.srv.json("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": self.a})
        self.assertEqual(st, 404, body)
        self.assertIn("--max-runtime-loras", body["error"]["message"])

    def test_offline_generate_selects_adapters(self):
        # `infera generate` lines: 'lora' scales, or a model that names an adapter (vLLM's batch files).
        import json
        inp = os.path.join(self.tmp.name, "in.jsonl")
        out = os.path.join(self.tmp.name, "out.jsonl")
        lines = [{"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True},
                 {"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "lora": []},
                 {"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "model": "style"}]
        with open(inp, "w") as f:
            f.write("".join(json.dumps(l) + "\n" for l in lines))
        r = subprocess.run([INFERA, "--log-level", "warn", "generate", "-i", inp, "-o", out, "--lora", self.a,
                            "--lora-modules", f"style={self.b}"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            got = [json.loads(l)["text"] for l in f]
        want = []
        for extra in (dict(), dict(lora=[]), dict(model="style")):
            st, body = self.srv.json("POST", "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0,
                                                             "ignore_eos": True, **extra})
            want.append(body["content"])
        self.assertEqual(got, want)
        with open(inp, "w") as f:
            f.write(json.dumps({"prompt": "x", "lora": [{"id": 3}]}) + "\n")
        r = subprocess.run([INFERA, "generate", "-i", inp, "-o", out, "--lora", self.a], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'lora' entry", r.stderr)


def stream_tokens(port, body, on_first_chunk):
    """Token ids of a streamed /completion; calls on_first_chunk() once the
    first chunk has arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/completion", body=json.dumps({**body, "stream": True, "return_tokens": True}),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    tokens, called = [], False
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        tokens += json.loads(line[6:]).get("tokens", [])
        if not called:
            called = True
            on_first_chunk()
    conn.close()
    return tokens


class RuntimeLoraTest(unittest.TestCase):
    """serve --max-runtime-loras: vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.a, cls.b = write_test_adapters(cls.tmp.name)
        # (--lora-modules in vLLM's JSON form here; NAME=PATH in LoraServerTest.)
        cls.srv = Server("--lora-modules", json.dumps({"name": "style", "path": cls.b, "base_model_name": "kjv"}),
                         "--max-runtime-loras", "1", "--max-num-seqs", "4")
        st, body = cls.srv.json("POST", "/tokenize", {"content": PROMPT})
        assert st == 200, body
        cls.prompt_ids = body["tokens"]

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.tmp.cleanup()

    def alone(self, *lora_args, n=16):
        return greedy_alone(self.prompt_ids, *lora_args, n=n)

    def load(self, name, path):
        self.addCleanup(self.unload, name)  # (a no-op 404 when the test unloaded it)
        return self.srv.request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload(self, name):
        return self.srv.request("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    def complete(self, model, n=16):
        st, body = self.srv.json("POST", "/completion", {"prompt": self.prompt_ids, "n_predict": n, "model": model,
                                                         "temperature": 0, "return_tokens": True, "ignore_eos": True})
        return st, body

    def complete_long(self, model):
        """(text, cached prompt tokens) of a prompt several KV blocks long."""
        prompt = PROMPT + ", and the heaven and the earth were made, and all the host of them." * 3
        st, body = self.srv.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 6, "model": model,
                                                             "temperature": 0})
        self.assertEqual(st, 200, body)
        return body["choices"][0]["text"], body["usage"]["prompt_tokens_details"]["cached_tokens"]

    def models(self):
        return [m["id"] for m in self.srv.json("GET", "/v1/models")[1]["data"]]

    def test_load_serve_unload_reload(self):
        with_a, with_b = self.alone("--lora", self.a), self.alone("--lora", self.b)
        st, _, text = self.load("rt", self.a)
        self.assertEqual((st, text.decode()), (200, "Success: LoRA adapter 'rt' added successfully."))
        self.assertIn("rt", self.models())
        self.assertEqual(self.srv.metric("infera_lora_adapters_loaded"), 2)  # style and rt
        st, listing = self.srv.json("GET", "/lora-adapters")
        self.assertEqual([(e["id"], e["name"], e["scale"]) for e in listing], [(0, "style", 0.0), (1, "rt", 0.0)])
        st, body = self.complete("rt")
        self.assertEqual((st, body["tokens"]), (200, with_a))
        # Its K/V is cached under it: the same request again reuses the blocks.
        text_a, _ = self.complete_long("rt")
        self.assertGreater(self.complete_long("rt")[1], 0)
        # Unloaded: gone from the listings, requests naming it 404.
        st, _, text = self.unload("rt")
        self.assertEqual((st, text.decode()), (200, "Success: LoRA adapter 'rt' removed successfully."))
        self.assertNotIn("rt", self.models())
        self.assertEqual(self.srv.metric("infera_lora_adapters_loaded"), 1)
        self.assertEqual(self.complete("rt")[0], 404)
        # The same name with another file: its output, none of the old K/V.
        self.assertEqual(self.load("rt", self.b)[0], 200)
        st, body = self.complete("rt")
        self.assertEqual((st, body["tokens"]), (200, with_b))
        text_b, cached = self.complete_long("rt")
        self.assertEqual(cached, 0)
        self.assertNotEqual(text_b, text_a)
        self.assertEqual(self.complete("style")[1]["tokens"], with_b)  # the start adapter alongside
        # vLLM's load_inplace: a again under the same name, no unload between.
        st, _, text = self.srv.request("POST", "/v1/load_lora_adapter",
                                       {"lora_name": "rt", "lora_path": self.a, "load_inplace": True})
        self.assertEqual(st, 200, text)
        self.assertEqual(self.complete("rt")[1]["tokens"], with_a)
        self.assertEqual(self.complete_long("rt"), (text_a, 0))
        self.assertEqual(self.srv.metric("infera_lora_adapters_loaded"), 2)
        self.assertEqual(self.unload("rt")[0], 200)

    def test_unload_while_streaming(self):
        n = 160
        want = self.alone("--lora", self.a, n=n)
        self.assertEqual(self.load("long", self.a)[0], 200)
        during = {}

        def unload_now():
            during["unload"] = self.unload("long")[0]
            # The one slot is still held by the running stream.
            st, _, text = self.load("other", self.b)
            during["load"] = (st, json.loads(text)["error"]["code"] if st != 200 else None)
        got = stream_tokens(self.srv.port, {"prompt": self.prompt_ids, "n_predict": n, "model": "long",
                                            "temperature": 0, "ignore_eos": True}, unload_now)
        self.assertEqual(during, {"unload": 200, "load": (409, "lora_slots_full")})
        self.assertEqual(got, want)  # the stream ended with the adapter it started with
        # The stream is over: its slot is free again.
        self.assertEqual(self.load("other", self.b)[0], 200)
        self.assertEqual(self.unload("other")[0], 200)
        self.assertTrue(any("LoRA adapter 'long' unloaded from slot 1" in line for line in self.srv.log),
                        "".join(self.srv.log[-20:]))

    def test_errors(self):
        self.assertEqual(self.load("dup", self.a)[0], 200)
        try:
            for name, path, status, param in (("dup", self.b, 400, "lora_name"),      # loaded already
                                              ("style", self.b, 400, "lora_name"),    # a start adapter's name
                                              ("more", self.b, 409, None),            # no slot free
                                              ("bad", self.tmp.name + "/none.gguf", 400, "lora_path"),
                                              ("", self.a, 400, "lora_name"),
                                              ("x", None, 400, "lora_path")):
                body = {"lora_name": name} if path is None else {"lora_name": name, "lora_path": path}
                st, err = self.srv.json("POST", "/v1/load_lora_adapter", body)
                self.assertEqual((st, err["error"]["param"]), (status, param), (name, err))
        finally:
            self.assertEqual(self.unload("dup")[0], 200)
        for body in ({"lora_name": "style", "lora_path": self.b, "load_inplace": True},  # a start adapter
                     {"lora_name": "y", "lora_path": self.b, "load_inplace": "yes"}):
            st, err = self.srv.json("POST", "/v1/load_lora_adapter", body)
            self.assertEqual(st, 400, (body, err))
        # The model file itself is not an adapter (a free slot now: the file is what is refused).
        st, err = self.srv.json("POST", "/v1/load_lora_adapter", {"lora_name": "m", "lora_path": MODEL})
        self.assertEqual((st, err["error"]["param"]), (400, "lora_path"), err)
        for body, status in (({"lora_name": "nope"}, 404), ({"lora_name": "style"}, 400), ({}, 400)):
            st, err = self.srv.json("POST", "/v1/unload_lora_adapter", body)
            self.assertEqual(st, status, (body, err))
        for flags in (["--lora-modules", '{"name": 3}'], ["--max-runtime-loras", "65"]):
            r = subprocess.run([INFERA, "serve", "--port", "0", *flags], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
            self.assertTrue(r.stderr.strip().splitlines()[-1].startswith("infera: error:"), r.stderr)
        # A runtime slot with no adapter in it: no scale, by id either.
        st, err = self.srv.json("POST", "/lora-adapters", [{"id": 1, "scale": 1}])
        self.assertEqual(st, 400, err)
        st, err = self.srv.json("POST", "/completion", {"prompt": "x", "n_predict": 1, "lora": [{"id": 1}]})
        self.assertEqual(st, 404, err)
        self.assertIn("slot 1 is empty", err["error"]["message"])


if __name__ == "__main__":
    unittest.main()
