"""POST /v1/embeddings (and llama-server's /embedding) against the numpy reference: the bundled model's final
hidden states (tests/reference/reference.py, from its safetensors), pooled by
mean / CLS / last token and L2-normalized, must equal what the server returns
— for inputs run together in one batch, split into prefill chunks, beside a
generation, as floats or base64. Then the error contract, and every KV block
freed. (The official OpenAI client's embeddings call is in
js/openai_client.test.mjs.)"""
import base64
import json
import os
import sys
import threading
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "py"))
from common import REPO, Server  # noqa: E402
import model_files as mf  # noqa: E402
import reference as ref  # noqa: E402

HF = os.path.join(REPO, "models", "kjv-7m", "hf")


def pool(h, how, normalize=True):
    v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[how]
    return v / np.linalg.norm(v) if normalize else v


class EmbeddingsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(HF, "config.json")) as f:
            cls.cfg = json.load(f)
        cls.cfg["head_dim"] = cls.cfg["hidden_size"] // cls.cfg["num_attention_heads"]
        cls.W = mf.read_safetensors(os.path.join(HF, "model.safetensors"))
        rng = np.random.default_rng(5)
        cls.inputs = [[1] + [int(t) for t in rng.integers(3, cls.cfg["vocab_size"], n)] for n in (40, 7, 23)]
        cls.hidden = []
        for toks in cls.inputs:
            out = []
            ref.forward(cls.cfg, cls.W, toks, hidden=out)
            cls.hidden.append(out[0])

    def check(self, srv, how, normalize=True, encoding="float"):
        body = {"input": self.inputs, "encoding_format": encoding}
        if not normalize:
            body["normalize"] = False
        st, b = srv.json("POST", "/v1/embeddings", body)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["object"], "list")
        self.assertEqual(b["usage"]["prompt_tokens"], sum(len(t) for t in self.inputs))
        self.assertEqual(b["usage"]["total_tokens"], b["usage"]["prompt_tokens"])
        self.assertEqual([d["index"] for d in b["data"]], [0, 1, 2])
        for d, h in zip(b["data"], self.hidden):
            self.assertEqual(d["object"], "embedding")
            if encoding == "base64":
                got = np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
            else:
                got = np.array(d["embedding"], dtype=np.float64)
            want = pool(h, how, normalize)
            self.assertEqual(got.shape, (self.cfg["hidden_size"],))
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            self.assertLess(err, 1e-4, f"{how} normalize={normalize}: relative error {err:.2e}")
            if normalize:
                self.assertAlmostEqual(float(np.linalg.norm(got)), 1.0, places=5)

    def test_pooling_matches_reference(self):
        for how in ("mean", "cls", "last"):
            # Prefill chunks of 16 tokens: the 40- and 23-token inputs are
            # pooled across steps, batched with each other.
            with Server("--pooling", how, "--max-num-batched-tokens", "16") as srv:
                self.check(srv, how)
                self.check(srv, how, normalize=False)
                self.check(srv, how, encoding="base64")
                self.assertEqual(srv.metric("infera_kv_blocks_used"), 0)

    def test_default_is_last_token_and_runs_beside_generation(self):
        with Server() as srv:
            results = {}

            def generate():
                results["gen"] = srv.json("POST", "/v1/completions",
                                          {"prompt": "In the beginning", "max_tokens": 200, "ignore_eos": True})
            t = threading.Thread(target=generate)
            t.start()
            for _ in range(5):
                self.check(srv, "last")
            t.join()
            self.assertEqual(results["gen"][0], 200)
            self.assertEqual(results["gen"][1]["usage"]["completion_tokens"], 200)
            # Text input is tokenized as a completion prompt is (BOS first).
            st, tok = srv.json("POST", "/tokenize", {"content": "In the beginning"})
            st, a = srv.json("POST", "/v1/embeddings", {"input": "In the beginning"})
            self.assertEqual(st, 200, a)
            st, b = srv.json("POST", "/v1/embeddings", {"input": tok["tokens"]})
            self.assertEqual(a["data"][0]["embedding"], b["data"][0]["embedding"])
            self.assertEqual(a["usage"]["prompt_tokens"], len(tok["tokens"]))
            self.assertEqual(srv.metric("infera_kv_blocks_used"), 0)
            # llama-server's /embedding: [{"index", "embedding": [vector]}],
            # each of its embd_normalize norms against numpy's.
            for norm in (-1, 0, 1, 2, 3):
                for path in ("/embedding", "/embeddings"):
                    st, b = srv.json("POST", path, {"content": self.inputs, "embd_normalize": norm})
                    self.assertEqual(st, 200, b)
                    self.assertEqual([e["index"] for e in b], [0, 1, 2])
                    for e, h in zip(b, self.hidden):
                        self.assertEqual(len(e["embedding"]), 1)
                        got = np.array(e["embedding"][0], dtype=np.float64)
                        raw = pool(h, "last", False)
                        if norm == -1:
                            want = raw
                        elif norm == 0:
                            want = raw / (np.max(np.abs(raw)) / 32760.0)
                        else:
                            want = raw / np.sum(np.abs(raw) ** norm) ** (1.0 / norm)
                        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
                        self.assertLess(err, 1e-4, f"embd_normalize {norm}: relative error {err:.2e}")
            st, b = srv.json("POST", "/embedding", {"content": "x", "encoding_format": "base64"})
            self.assertEqual((st, b["error"]["param"]), (400, "encoding_format"))

    def test_errors(self):
        with Server("--api-key", "k") as srv:
            auth = {"Authorization": "Bearer k"}
            st, _ = srv.json("POST", "/v1/embeddings", {"input": "x"})
            self.assertEqual(st, 401)
            n_ctx = srv.json("GET", "/v1/models", headers=auth)[1]["data"][0]["max_model_len"]
            cases = [({}, "input"), ({"input": ""}, "input"), ({"input": []}, "input"), ({"input": [[]]}, "input"),
                     ({"input": 3}, "input"), ({"input": [1, 99999]}, "input"), ({"input": [{"a": 1}]}, "input"),
                     ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                     ({"input": "x", "dimensions": 8}, "dimensions"),
                     ({"input": "x", "embd_normalize": 65}, "embd_normalize"),
                     ({"input": "x", "embd_normalize": 1.5}, "embd_normalize"),
                     ({"input": "x", "truncate_prompt_tokens": 4}, "truncate_prompt_tokens"),
                     ({"input": "x", "max_tokens": 4}, "max_tokens"),
                     ({"input": [[1] * (n_ctx + 1)]}, "input")]
            for body, param in cases:
                st, b = srv.json("POST", "/v1/embeddings", body, headers=auth)
                self.assertEqual(st, 400, (body, b))
                self.assertEqual(b["error"]["param"], param, (body, b))
            st, b = srv.json("POST", "/v1/embeddings", {"input": [[1] * (n_ctx + 1)]}, headers=auth)
            self.assertEqual(b["error"]["code"], "context_length_exceeded")
            st, b = srv.json("POST", "/v1/embeddings", {"input": "x", "model": "other"}, headers=auth)
            self.assertEqual((st, b["error"]["code"]), (404, "model_not_found"))
            st, b = srv.json("POST", "/v1/embeddings", {"input": "x", "dimensions": self.cfg["hidden_size"],
                                                        "user": "u", "embd_normalize": -1}, headers=auth)
            self.assertEqual(st, 200, b)
            self.assertNotAlmostEqual(float(np.linalg.norm(b["data"][0]["embedding"])), 1.0, places=3)
            self.assertEqual(srv.request("GET", "/v1/embeddings", headers=auth)[0], 405)
        r = __import__("subprocess").run([os.environ.get("INFERA_BIN", os.path.join(REPO, "build", "tools", "infera")),
                                          "serve", "--pooling", "max"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--pooling 'max'", r.stderr)


if __name__ == "__main__":
    unittest.main()
