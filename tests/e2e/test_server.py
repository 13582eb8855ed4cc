"""`infera serve` over raw HTTP: response shapes, every malformed-input case,
limits (413, 429), slow and partial requests, disconnects (the engine frees
the request's KV blocks), 64 concurrent streams equal to sequential greedy
runs, and graceful shutdown on SIGTERM."""
import json
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_patch  # noqa: E402
from common import REPO, Server, wait_for  # noqa: E402


def sse_request(port, path, body, read_events=None, timeout=120):
    """Sends a streaming request; returns (socket, list of parsed events).
    Reads all events (or only `read_events` of them, leaving the socket open)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    data = json.dumps(body).encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    buf = b""
    events = []
    head_done = False
    while True:
        if read_events is not None and len(events) >= read_events:
            return s, events
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        if not head_done:
            if b"\r\n\r\n" not in buf:
                continue
            head, buf = buf.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200"), head
            head_done = True
        # Chunked framing: the payload of each chunk is appended to `text`.
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                break
            size = int(buf[:line_end], 16)
            if len(buf) < line_end + 2 + size + 2:
                break
            payload = buf[line_end + 2:line_end + 2 + size]
            buf = buf[line_end + 2 + size + 2:]
            if size == 0:
                s.close()
                return None, events
            for ev in payload.decode().split("\n\n"):
                if ev.startswith("data: "):
                    d = ev[6:]
                    events.append(d if d == "[DONE]" else json.loads(d))
    s.close()
    return None, events


def read_rest(s, until=None):
    """Bytes from socket s until the peer closes (or the data ends with `until`); closes s."""
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        if until is not None and buf.endswith(until):
            break
    s.close()
    return buf


def stream_text(events):
    text = {}
    for e in events:
        if e == "[DONE]":
            continue
        for c in e.get("choices", []):
            text[c["index"]] = text.get(c["index"], "") + c.get("text", c.get("delta", {}).get("content", "") or "")
    return text


def assert_error_object(test, body, status=None):
    test.assertIn("error", body)
    err = body["error"]
    for k in ("message", "type", "param", "code"):
        test.assertIn(k, err)
    test.assertTrue(err["message"])


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--max-n", "4", "--read-timeout", "2")

    @classmethod
    def tearDownClass(cls):
        code = cls.srv.stop()
        assert code == 0, code

    def test_shapes(self):
        st, b = self.srv.json("GET", "/health")
        self.assertEqual((st, b["status"]), (200, "ok"))
        st, b = self.srv.json("GET", "/ready")
        self.assertEqual((st, b["status"], b["waiting"], b["max_waiting"]), (200, "ready", 0, 256))
        st, b = self.srv.json("GET", "/v1/models")
        self.assertEqual(st, 200)
        self.assertEqual(b["object"], "list")
        name = b["data"][0]["id"]
        st, b = self.srv.json("GET", "/v1/models/" + name)
        self.assertEqual((st, b["id"]), (200, name))
        st, b = self.srv.json("POST", "/v1/completions",
                              {"model": name, "prompt": "In the beginning", "max_tokens": 8, "temperature": 0})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["object"], "text_completion")
        self.assertTrue(b["id"].startswith("cmpl-"))
        c = b["choices"][0]
        self.assertEqual((c["index"], c["finish_reason"], c["logprobs"]), (0, "length", None))
        u = b["usage"]
        self.assertEqual(u["completion_tokens"], 8)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + 8)
        self.assertIn("cached_tokens", u["prompt_tokens_details"])
        st, b = self.srv.json("POST", "/v1/chat/completions",
                              {"messages": [{"role": "system", "content": "Answer."},
                                            {"role": "user", "content": [{"type": "text", "text": "Who?"}]}],
                               "max_completion_tokens": 6, "temperature": 0})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["object"], "chat.completion")
        self.assertEqual(b["choices"][0]["message"]["role"], "assistant")
        self.assertIsInstance(b["choices"][0]["message"]["content"], str)
        # tokenize / detokenize round trip
        st, t = self.srv.json("POST", "/tokenize", {"content": "And God said", "add_special": False})
        self.assertEqual(st, 200)
        self.assertEqual(t["count"], len(t["tokens"]))
        st, d = self.srv.json("POST", "/detokenize", {"tokens": t["tokens"]})
        self.assertEqual((st, d["content"].strip()), (200, "And God said"))

    def test_llama_server_completion_endpoint(self):
        """llama-server's /completion (and /completions): the same text as
        /v1/completions, in its shape: content, stop, stop_type (limit, word
        with the stopping word, eos), token counts and timings; streamed as
        content chunks ending with the final object, without [DONE]."""
        body = {"prompt": "In the beginning", "n_predict": 12, "temperature": 0}
        st, v1 = self.srv.json("POST", "/v1/completions", body)
        self.assertEqual(st, 200, v1)
        for path in ("/completion", "/completions"):
            st, b = self.srv.json("POST", path, dict(body, cache_prompt=True, id_slot=-1))
            self.assertEqual(st, 200, b)
            self.assertEqual(b["content"], v1["choices"][0]["text"])
            self.assertEqual((b["stop"], b["stop_type"], b["stopping_word"]), (True, "limit", ""))
            self.assertEqual((b["tokens_predicted"], b["tokens_evaluated"]), (12, v1["usage"]["prompt_tokens"]))
            self.assertEqual(b["prompt"], "In the beginning")
            t = b["timings"]
            self.assertEqual(t["predicted_n"], 12)
            self.assertEqual(t["prompt_n"] + b["tokens_cached"], b["tokens_evaluated"])
            self.assertGreater(t["predicted_ms"], 0)
            self.assertGreater(t["predicted_per_second"], 0)
        # A stop string: the text before it, and which one.
        word = v1["choices"][0]["text"].split()[2]
        st, b = self.srv.json("POST", "/completion", dict(body, stop=["zzz", word]))
        self.assertEqual((st, b["stop_type"], b["stopping_word"]), (200, "word", word))
        self.assertTrue(v1["choices"][0]["text"].startswith(b["content"] + word), (b["content"], word))
        # vLLM's stop_reason on the OpenAI endpoint: the stop string, else null.
        self.assertIsNone(v1["choices"][0]["stop_reason"])
        st, b = self.srv.json("POST", "/v1/completions", dict(body, stop=["zzz", word]))
        self.assertEqual((st, b["choices"][0]["finish_reason"], b["choices"][0]["stop_reason"]), (200, "stop", word))
        # vLLM's include_stop_str_in_output: the text ends with the stop string.
        st, k = self.srv.json("POST", "/v1/completions", dict(body, stop=["zzz", word], include_stop_str_in_output=True))
        self.assertEqual(k["choices"][0]["text"], b["choices"][0]["text"] + word)
        _, events = sse_request(self.srv.port, "/v1/completions", dict(body, stop=[word], stream=True))
        finals = [e for e in events if e != "[DONE]" and e["choices"] and e["choices"][0]["finish_reason"]]
        self.assertEqual([e["choices"][0]["stop_reason"] for e in finals], [word])
        # A grammar that ends: stop_type eos (nothing more may follow).
        st, b = self.srv.json("POST", "/completion", dict(body, grammar='root ::= "Amen."'))
        self.assertEqual((st, b["content"], b["stop_type"]), (200, "Amen.", "eos"))
        # Streamed: content chunks, then the final object with empty content.
        _, events = sse_request(self.srv.port, "/completion", dict(body, stream=True))
        self.assertNotIn("[DONE]", events)
        self.assertTrue(all(e["stop"] is False for e in events[:-1]))
        self.assertEqual("".join(e["content"] for e in events[:-1]), v1["choices"][0]["text"])
        self.assertEqual([e["tokens_predicted"] for e in events[:-1]], list(range(1, 13)))
        last = events[-1]
        self.assertEqual((last["stop"], last["content"], last["stop_type"], last["tokens_predicted"]),
                         (True, "", "limit", 12))
        # One text per prompt, without it; probabilities as n_probs: the
        # OpenAI endpoint's other forms are 400 here.
        for extra, param in (({"n": 2}, "n"), ({"echo": True}, "echo"), ({"logprobs": 2}, "logprobs"),
                             ({"n_probs": 1001}, "n_probs"), ({"return_tokens": 1}, "return_tokens")):
            st, b = self.srv.json("POST", "/completion", dict(body, **extra))
            self.assertEqual(st, 400, (extra, b))
            assert_error_object(self, b)
            self.assertEqual(b["error"]["param"], param)

    def test_llama_server_completion_probabilities(self):
        """/completion's n_probs: completion_probabilities per token (id,
        token, bytes, logprob, top_logprobs) equal to /v1/completions'
        logprobs; with post_sampling_probs the probabilities of the
        distribution each token was drawn from (top_k 3 at temperature 0.7:
        softmax(logprob / 0.7) over the 3 most likely, the same seeded draw);
        return_tokens; streamed per chunk; several prompts as an array."""
        body = {"prompt": "And God said", "n_predict": 6, "temperature": 0}
        st, v1 = self.srv.json("POST", "/v1/completions", dict(body, logprobs=3))
        self.assertEqual(st, 200, v1)
        lp = v1["choices"][0]["logprobs"]
        st, b = self.srv.json("POST", "/completion", dict(body, n_probs=3, return_tokens=True))
        self.assertEqual(st, 200, b)
        probs = b["completion_probabilities"]
        self.assertEqual(len(probs), 6)
        self.assertEqual([p["token"] for p in probs], lp["tokens"])
        self.assertEqual([p["id"] for p in probs], b["tokens"])
        _, tk = self.srv.json("POST", "/tokenize", {"content": "And God said" + b["content"], "add_special": False})
        for i, p in enumerate(probs):
            self.assertEqual(set(p), {"id", "token", "bytes", "logprob", "top_logprobs"})
            self.assertAlmostEqual(p["logprob"], lp["token_logprobs"][i], places=6)
            self.assertEqual(bytes(p["bytes"]).decode(), p["token"])
            self.assertEqual({t["token"]: t["logprob"] for t in p["top_logprobs"]}, lp["top_logprobs"][i])
            self.assertEqual(p["top_logprobs"][0]["id"], p["id"])  # greedy: the most likely
            self.assertEqual(len(p["top_logprobs"]), 3)
        self.assertEqual(tk["tokens"][-6:], b["tokens"])
        # Post-sampling: the distribution the seeded draw used.
        sampled = dict(body, temperature=0.7, top_k=3, seed=11, n_probs=5)
        _, raw = self.srv.json("POST", "/completion", sampled)
        st, post = self.srv.json("POST", "/completion", dict(sampled, post_sampling_probs=True))
        self.assertEqual(st, 200, post)
        self.assertEqual(post["content"], raw["content"])  # the same draws
        for r, p in zip(raw["completion_probabilities"], post["completion_probabilities"], strict=True):
            self.assertEqual(set(p), {"id", "token", "bytes", "prob", "top_probs"})
            kept = r["top_logprobs"][:3]
            z = sum(math.exp(t["logprob"] / 0.7) for t in kept)
            want = [(t["id"], math.exp(t["logprob"] / 0.7) / z) for t in kept]
            got = [(t["id"], t["prob"]) for t in p["top_probs"]]
            self.assertEqual([g[0] for g in got], [w[0] for w in want])
            for (_, g), (_, w) in zip(got, want):
                self.assertAlmostEqual(g, w, places=5)
            self.assertAlmostEqual(p["prob"], dict(want)[p["id"]], places=5)
        st, g = self.srv.json("POST", "/completion", dict(body, n_probs=2, post_sampling_probs=True))
        self.assertEqual([(p["prob"], [t["prob"] for t in p["top_probs"]]) for p in g["completion_probabilities"]],
                         [(1.0, [1.0])] * 6)  # greedy: all on the argmax
        # Streamed: each chunk its token's entry and id; the final object none.
        _, events = sse_request(self.srv.port, "/completion", dict(body, n_probs=3, return_tokens=True, stream=True))
        chunks, last = events[:-1], events[-1]
        self.assertEqual([p for e in chunks for p in e["completion_probabilities"]], probs)
        self.assertEqual([t for e in chunks for t in e["tokens"]], b["tokens"])
        self.assertEqual((last["stop"], last["tokens"]), (True, []))
        self.assertNotIn("completion_probabilities", last)
        # Several prompts: an array of answers, each as a request of its own.
        st, many = self.srv.json("POST", "/completion", dict(body, prompt=["And God said", "In the beginning"]))
        self.assertEqual(st, 200, many)
        _, second = self.srv.json("POST", "/completion", dict(body, prompt="In the beginning"))
        self.assertEqual([(m["index"], m["content"]) for m in many],
                         [(0, v1["choices"][0]["text"]), (1, second["content"])])
        _, events = sse_request(self.srv.port, "/completion",
                                dict(body, prompt=["And God said", "In the beginning"], stream=True))
        for i, text in enumerate((v1["choices"][0]["text"], second["content"])):
            mine = [e for e in events if e["index"] == i]
            self.assertEqual("".join(e["content"] for e in mine), text)
            self.assertEqual([e["stop"] for e in mine], [False] * 6 + [True])
        # On the OpenAI endpoints n_probs is the top-k of logprobs (as llama-server takes it).
        st, c = self.srv.json("POST", "/v1/completions", dict(body, n_probs=3))
        self.assertEqual(c["choices"][0]["logprobs"], lp)
        st, c = self.srv.json("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "n_probs": 2})
        self.assertEqual([len(t["top_logprobs"]) for t in c["choices"][0]["logprobs"]["content"]], [2, 2])
        for extra in ({"n_probs": 21}, {"return_tokens": True}):
            st, e = self.srv.json("POST", "/v1/completions", dict(body, **extra))
            self.assertEqual((st, e["error"]["param"]), (400, next(iter(extra))))

    def test_llama_server_props_and_apply_template(self):
        st, models = self.srv.json("GET", "/v1/models")
        st, p = self.srv.json("GET", "/props")
        self.assertEqual(st, 200, p)
        g = p["default_generation_settings"]
        self.assertEqual(g["n_ctx"], models["data"][0]["max_model_len"])
        # The defaults a request without sampling fields gets (OpenAI's).
        self.assertEqual((g["params"]["temperature"], g["params"]["top_p"], g["params"]["n_predict"]), (1.0, 1.0, -1))
        self.assertEqual(p["total_slots"], 64)
        self.assertEqual(p["model_alias"], models["data"][0]["id"])
        self.assertIn("message", p["chat_template"])  # the model's Jinja template
        self.assertEqual(self.srv.request("POST", "/props", {})[0], 405)
        chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]}
        st, t = self.srv.json("POST", "/apply-template", chat)
        self.assertEqual(st, 200, t)
        self.assertIn("Be brief.", t["prompt"])
        self.assertTrue(t["prompt"].index("Be brief.") < t["prompt"].index("Hello"))
        # The rendered text is what a chat request tokenizes.
        _, a = self.srv.json("POST", "/tokenize", chat)
        _, b = self.srv.json("POST", "/tokenize", {"content": t["prompt"]})
        self.assertEqual(a["tokens"], b["tokens"])
        st, b = self.srv.json("POST", "/apply-template", {"messages": []})
        self.assertEqual(st, 400, b)
        assert_error_object(self, b)

    def test_prompt_forms_n_echo_and_logprobs(self):
        st, t = self.srv.json("POST", "/tokenize", {"content": "The earth"})
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": ["In the beginning", "The earth"], "n": 2, "max_tokens": 4,
                               "temperature": 0, "echo": True})
        self.assertEqual(st, 200, b)
        self.assertEqual([c["index"] for c in b["choices"]], [0, 1, 2, 3])
        self.assertTrue(b["choices"][0]["text"].startswith("In the beginning"))
        self.assertTrue(b["choices"][2]["text"].startswith("The earth"))
        self.assertEqual(b["choices"][0]["text"], b["choices"][1]["text"])  # greedy: the same
        st, by_ids = self.srv.json("POST", "/v1/completions", {"prompt": t["tokens"], "max_tokens": 4, "temperature": 0})
        self.assertEqual(st, 200, by_ids)
        self.assertEqual("The earth" + by_ids["choices"][0]["text"], b["choices"][2]["text"])
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": "In the beginning", "max_tokens": 5, "temperature": 0, "logprobs": 3})
        lp = b["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 5)
        self.assertEqual("".join(lp["tokens"]), b["choices"][0]["text"])
        for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            self.assertEqual(len(top), 3)
            self.assertLessEqual(l, 0)
            best = max(top, key=top.get)
            self.assertEqual(best, tok)  # greedy picks the most likely
            self.assertAlmostEqual(top[best], l, places=5)

    def test_echo_with_logprobs_scores_the_prompt(self):
        # OpenAI's legacy prompt scoring (lm-eval's log-likelihoods): echo +
        # logprobs, max_tokens 0.
        prompt = "In the beginning God created the heaven"
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0})
        self.assertEqual(st, 200, b)
        c = b["choices"][0]
        self.assertEqual((c["text"], c["finish_reason"]), (prompt, "length"))
        self.assertEqual(b["usage"]["completion_tokens"], 0)
        lp = c["logprobs"]
        n = b["usage"]["prompt_tokens"]
        self.assertEqual([len(lp[k]) for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")], [n] * 4)
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        for l, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
            self.assertLessEqual(l, 0)
            self.assertEqual(len(top), 2)
        # The same numbers as the distribution the model samples from: position
        # i's top tokens equal those of a generation after the first i tokens.
        st, t = self.srv.json("POST", "/tokenize", {"content": prompt, "add_special": True})
        self.assertEqual(len(t["tokens"]), n)
        for i in (1, 4, n - 1):
            st, g = self.srv.json("POST", "/v1/completions", {"prompt": t["tokens"][:i], "max_tokens": 1,
                                                               "temperature": 0, "logprobs": 2})
            self.assertEqual(st, 200, g)
            want = g["choices"][0]["logprobs"]["top_logprobs"][0]
            got = lp["top_logprobs"][i]
            self.assertEqual(sorted(got), sorted(want), i)
            for k in want:
                self.assertAlmostEqual(got[k], want[k], places=4)
        # With generated tokens: the prompt's entries, then the completion's.
        st, b3 = self.srv.json("POST", "/v1/completions",
                               {"prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": 2, "temperature": 0})
        lp3 = b3["choices"][0]["logprobs"]
        self.assertEqual(len(lp3["tokens"]), n + 3)
        self.assertEqual(lp3["token_logprobs"][:n], lp["token_logprobs"])
        self.assertTrue(b3["choices"][0]["text"].startswith(prompt))
        # Offsets index the returned text (BOS and the dummy-prefix space take no room).
        offs, text = lp3["text_offset"], b3["choices"][0]["text"]
        self.assertEqual(offs, sorted(offs))
        self.assertEqual(offs[n], len(prompt))
        for tok_text, off in zip(lp3["tokens"][2:], offs[2:]):
            self.assertTrue(text[off:].startswith(tok_text), (tok_text, off))
        # Streaming: the echo chunk carries the prompt's log-probabilities.
        _, events = sse_request(self.srv.port, "/v1/completions",
                                {"prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": 2, "temperature": 0,
                                 "stream": True})
        first = events[0]["choices"][0]
        self.assertEqual(first["text"], prompt)
        self.assertEqual(first["logprobs"]["token_logprobs"], lp["token_logprobs"])
        self.assertEqual(stream_text(events)[0], b3["choices"][0]["text"])
        # max_tokens 0 without echo: nothing to return.
        st, e = self.srv.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 0})
        assert_error_object(self, e, 400)
        self.assertEqual((st, e["error"]["param"]), (400, "max_tokens"))

    def test_vllm_stop_token_ids(self):
        """vLLM's stop_token_ids: the output ends before the token;
        stop_reason is its id (streamed too); min_tokens masks it."""
        body = {"prompt": "In the beginning", "max_tokens": 10, "temperature": 0}
        st, full = self.srv.json("POST", "/v1/completions", dict(body, return_tokens_as_token_ids=False))
        self.assertEqual(st, 200, full)
        _, t = self.srv.json("POST", "/tokenize", {"content": full["choices"][0]["text"], "add_special": False})
        stop = t["tokens"][3]
        st, b = self.srv.json("POST", "/v1/completions", dict(body, stop_token_ids=[stop]))
        c = b["choices"][0]
        self.assertEqual((st, c["finish_reason"], c["stop_reason"]), (200, "stop", stop), b)
        self.assertTrue(full["choices"][0]["text"].startswith(c["text"]))
        self.assertLess(b["usage"]["completion_tokens"], 10)
        _, events = sse_request(self.srv.port, "/v1/completions", dict(body, stop_token_ids=[stop], stream=True))
        self.assertEqual([e["choices"][0]["stop_reason"] for e in events[:-1] if e["choices"][0]["finish_reason"]],
                         [stop])
        st, b = self.srv.json("POST", "/v1/completions", dict(body, stop_token_ids=[stop], min_tokens=10))
        self.assertEqual(b["choices"][0]["finish_reason"], "length")
        for bad in ([-1], [10 ** 6], "3", [1.5]):
            st, e = self.srv.json("POST", "/v1/completions", dict(body, stop_token_ids=bad))
            self.assertEqual((st, e["error"]["param"]), (400, "stop_token_ids"), bad)
        # skip_special_tokens=False: a control token the model writes (here
        # forced by logit_bias: BOS, <s>) appears in the text.
        forced = dict(body, max_tokens=2, logit_bias={"1": 100})
        _, plain = self.srv.json("POST", "/v1/completions", forced)
        _, shown = self.srv.json("POST", "/v1/completions", dict(forced, skip_special_tokens=False))
        self.assertEqual((plain["choices"][0]["text"], shown["choices"][0]["text"]), ("", "<s>" * 2))

    def test_vllm_prompt_logprobs(self):
        """vLLM's prompt_logprobs: per prompt token after the first, {id:
        {logprob, rank, decoded_token}} of it and the k most likely there
        (the same numbers as echo + logprobs; rank 1 + the tokens more
        likely); each choice's on completions, the response's on chat; not
        with stream."""
        prompt = "In the beginning God created the heaven"
        st, e = self.srv.json("POST", "/v1/completions",
                              {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 20})
        echo = e["choices"][0]["logprobs"]
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 20, "temperature": 0})
        self.assertEqual(st, 200, b)
        pl = b["choices"][0]["prompt_logprobs"]
        _, t = self.srv.json("POST", "/tokenize", {"content": prompt})
        self.assertEqual(len(pl), len(t["tokens"]))
        self.assertIsNone(pl[0])
        for i in range(1, len(pl)):
            entry = {int(k): v for k, v in pl[i].items()}
            mine = entry[t["tokens"][i]]
            self.assertAlmostEqual(mine["logprob"], echo["token_logprobs"][i], places=5)
            self.assertEqual(mine["decoded_token"], echo["tokens"][i])
            # The 20 most likely (the prompt token among them, or a 21st entry).
            top = [v for k, v in entry.items() if k != t["tokens"][i] or mine["rank"] <= 20]
            self.assertEqual(len(top), 20)
            self.assertEqual(sorted(v["rank"] for v in top), list(range(1, 21)))
            self.assertEqual({v["decoded_token"]: v["logprob"] for v in top}, echo["top_logprobs"][i])
            above = sum(1 for v in top if v["logprob"] > mine["logprob"])
            self.assertEqual(above + 1 if mine["rank"] <= 20 else 20, mine["rank"] if mine["rank"] <= 20 else above)
        # k = 0: the prompt token alone; echo's k and its own coexist.
        st, b = self.srv.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2, "prompt_logprobs": 0,
                                                          "echo": True, "logprobs": 3})
        self.assertEqual([len(d) for d in b["choices"][0]["prompt_logprobs"][1:]], [1] * (len(pl) - 1))
        self.assertEqual([len(d) for d in b["choices"][0]["logprobs"]["top_logprobs"][1:]],
                         [3] * (len(pl) + 1))
        # Chat: on the response, over the rendered prompt.
        st, c = self.srv.json("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1,
                               "prompt_logprobs": 1})
        self.assertEqual(st, 200, c)
        self.assertEqual(len(c["prompt_logprobs"]), c["usage"]["prompt_tokens"])
        self.assertNotIn("prompt_logprobs", c["choices"][0])
        for body in ({"prompt": prompt, "prompt_logprobs": 2, "stream": True}, {"prompt": prompt, "prompt_logprobs": -1}):
            st, e = self.srv.json("POST", "/v1/completions", body)
            self.assertEqual((st, e["error"]["param"]), (400, "prompt_logprobs"), body)

    def test_n_choices_share_the_prompt(self):
        # The first choice computes the prompt; the other n - 1 find its full
        # blocks in the prefix cache (blocks of 16: 192 of 200 tokens).
        prompt = [400 + (i * 7) % 500 for i in range(200)]
        hits0 = self.srv.metric("infera_prefix_cache_hits_total")
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": prompt, "n": 4, "max_tokens": 6, "temperature": 0.8, "seed": 3})
        self.assertEqual(st, 200, b)
        self.assertEqual([c["index"] for c in b["choices"]], [0, 1, 2, 3])
        self.assertTrue(0 < b["usage"]["completion_tokens"] <= 24)
        self.assertGreaterEqual(self.srv.metric("infera_prefix_cache_hits_total") - hits0, 3 * 192)
        _, events = sse_request(self.srv.port, "/v1/completions",
                                {"prompt": prompt, "n": 3, "max_tokens": 5, "stream": True, "seed": 3,
                                 "temperature": 0.8})
        self.assertEqual(events[-1], "[DONE]")
        texts = stream_text(events)
        self.assertEqual(sorted(texts), [0, 1, 2])
        for i in range(3):  # same seeds: the 5-token streams begin the 6-token texts
            self.assertTrue(b["choices"][i]["text"].startswith(texts[i]), (i, texts[i], b["choices"][i]["text"]))
        self.assertTrue(wait_for(lambda: self.srv.metric("infera_kv_blocks_used") == 0))

    def test_malformed_requests(self):
        long_prompt = [300] * 1100  # the demo model's context is 1024
        cases = [
            ("/v1/completions", b"{not json", 400, None),
            ("/v1/completions", b"[1, 2]", 400, None),
            ("/v1/completions", {"max_tokens": 4}, 400, "prompt"),
            ("/v1/chat/completions", {"max_tokens": 4}, 400, "messages"),
            ("/v1/chat/completions", {"messages": []}, 400, "messages"),
            ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
            ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages"),
            ("/v1/completions", {"prompt": 42}, 400, "prompt"),
            ("/v1/completions", {"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 10 ** 12}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 5000}, 400, "prompt"),
            ("/v1/completions", {"prompt": "x", "max_tokens": "10"}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
            ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
            ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', 400, None),
            ("/v1/completions", b'{"prompt": "x", "temperature": 1e400}', 400, None),
            ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
            ("/v1/completions", {"prompt": "x", "n": 5}, 400, "n"),
            ("/v1/completions", {"prompt": "x", "n": 1.5}, 400, "n"),
            ("/v1/completions", {"prompt": "x", "stop": 7}, 400, "stop"),
            ("/v1/completions", {"prompt": "x", "logprobs": 50}, 400, "logprobs"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1000}}, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
            ("/v1/completions", {"prompt": [1, 2, 10 ** 9]}, 400, "prompt"),
            ("/v1/completions", {"prompt": long_prompt}, 400, "prompt"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400,
             "top_logprobs"),
            ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
        ]
        for path, body, status, param in cases:
            with self.subTest(body=body):
                st, _, data = self.srv.request("POST", path, body)
                self.assertEqual(st, status, data)
                b = json.loads(data)
                assert_error_object(self, b)
                if param is not None:
                    self.assertEqual(b["error"]["param"], param, b)
        st, b = self.srv.json("POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"})
        self.assertEqual(st, 404)
        self.assertEqual(b["error"]["code"], "model_not_found")
        st, b = self.srv.json("GET", "/v2/nothing")
        self.assertEqual(st, 404)
        assert_error_object(self, b)
        st, b = self.srv.json("GET", "/v1/completions")
        self.assertEqual(st, 405)
        # Fields no API defines are refused (as OpenAI does), naming the field;
        # no-effect fields are accepted.
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": "x", "max_tokens": 2, "user": "u1", "some_extension": {"a": 1}})
        self.assertEqual(st, 400, b)
        self.assertEqual(b["error"]["param"], "some_extension", b)
        self.assertIn("Unrecognized request argument", b["error"]["message"])
        st, b = self.srv.json("POST", "/v1/completions",
                              {"prompt": "x", "max_tokens": 2, "user": "u1", "cache_prompt": True,
                               "prompt_cache_key": "k", "id_slot": -1, "service_tier": "auto"})
        self.assertEqual(st, 200, b)
        st, b = self.srv.json("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "x"}], "prompt": "x"})
        self.assertEqual((st, b["error"]["param"]), (400, "prompt"), b)
        self.assertIn("/v1/completions", b["error"]["message"])
        self.assertEqual(self.srv.json("GET", "/health")[0], 200)

    def test_oversize_body_is_413(self):
        body = b'{"prompt": "' + b"a" * (9 << 20) + b'"}'
        st, _, data = self.srv.request("POST", "/v1/completions", body)
        self.assertEqual(st, 413)
        assert_error_object(self, json.loads(data))

    def test_slow_and_partial_requests(self):
        # A request sent a few bytes at a time (within the read timeout) works.
        data = json.dumps({"prompt": "In the beginning", "max_tokens": 3, "temperature": 0}).encode()
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(data)).encode() +
               b"\r\nConnection: close\r\n\r\n" + data)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        for i in range(0, len(raw), 16):
            s.sendall(raw[i:i + 16])
            time.sleep(0.01)
        resp = read_rest(s)
        self.assertTrue(resp.startswith(b"HTTP/1.1 200"), resp[:200])
        # A partial request is cut off after --read-timeout (2 s), and others
        # are served meanwhile.
        p = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        p.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        t0 = time.time()
        self.assertEqual(self.srv.json("GET", "/health")[0], 200)
        self.assertEqual(p.recv(100), b"")  # closed by the server
        self.assertLess(time.time() - t0, 10)
        p.close()
        # Malformed HTTP gets a 400 and a closed connection.
        m = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        m.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n")
        self.assertTrue(m.recv(100).startswith(b"HTTP/1.1 400"))
        m.close()

    def test_disconnect_mid_stream_frees_blocks(self):
        self.assertTrue(wait_for(lambda: self.srv.metric("infera_kv_blocks_used") == 0))
        steps0 = self.srv.metric("infera_engine_steps_total")
        s, events = sse_request(self.srv.port, "/v1/completions",
                                {"prompt": "In the beginning", "max_tokens": 800, "ignore_eos": True,
                                 "stream": True}, read_events=3)
        self.assertGreater(self.srv.metric("infera_kv_blocks_used"), 0)
        s.close()
        self.assertTrue(wait_for(lambda: self.srv.metric("infera_kv_blocks_used") == 0 and
                                 self.srv.metric("infera_num_requests_running") == 0, timeout=5))
        steps = self.srv.metric("infera_engine_steps_total") - steps0
        self.assertLess(steps, 400)  # cancelled, not run to 800 tokens

    def test_disconnect_while_queued(self):
        with Server("--max-num-seqs", "1") as srv:
            a, _ = sse_request(srv.port, "/v1/completions",
                               {"prompt": "In the beginning", "max_tokens": 900, "ignore_eos": True, "stream": True},
                               read_events=2)
            # b waits behind a (one sequence at a time), then its client leaves.
            b = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            data = json.dumps({"prompt": "The earth", "max_tokens": 900, "ignore_eos": True}).encode()
            b.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(data)).encode() +
                      b"\r\n\r\n" + data)
            self.assertTrue(wait_for(lambda: srv.metric("infera_num_requests_waiting") == 1, timeout=5))
            b.close()
            self.assertTrue(wait_for(lambda: srv.metric("infera_num_requests_waiting") == 0, timeout=5))
            self.assertEqual(srv.metric("infera_num_requests_running"), 1)  # a goes on
            a.close()
            self.assertTrue(wait_for(lambda: srv.metric("infera_kv_blocks_used") == 0 and
                                     srv.metric("infera_num_requests_running") == 0, timeout=5))

    def test_speculative_ngram_same_text_and_metrics(self):
        body = {"prompt": "And God said, Let there be light: and there was light. And God said, Let there be",
                "max_tokens": 60, "temperature": 0, "ignore_eos": True}
        want = self.srv.json("POST", "/v1/completions", body)[1]["choices"][0]["text"]
        seeded = dict(body, temperature=0.8, seed=7, max_tokens=40)
        want_seeded = self.srv.json("POST", "/v1/completions", seeded)[1]["choices"][0]["text"]
        with Server("--spec", "ngram", "--draft-max", "6") as srv:
            self.assertEqual(srv.json("POST", "/v1/completions", body)[1]["choices"][0]["text"], want)
            self.assertEqual(srv.json("POST", "/v1/completions", seeded)[1]["choices"][0]["text"], want_seeded)
            drafted = srv.metric("infera_spec_decode_num_draft_tokens_total")
            self.assertGreater(drafted, 0)
            self.assertGreater(srv.metric("infera_spec_decode_num_accepted_tokens_total"), 0)
            self.assertLessEqual(srv.metric("infera_spec_decode_num_accepted_tokens_total"), drafted)

    def test_queue_limit_429(self):
        with Server("--max-num-seqs", "1", "--max-queue", "1") as srv:
            a, _ = sse_request(srv.port, "/v1/completions",
                               {"prompt": "In the beginning", "max_tokens": 900, "ignore_eos": True, "stream": True},
                               read_events=2)
            b, _ = sse_request(srv.port, "/v1/completions",
                               {"prompt": "The earth", "max_tokens": 900, "ignore_eos": True, "stream": True},
                               read_events=0)
            self.assertTrue(wait_for(lambda: srv.metric("infera_num_requests_waiting") == 1, timeout=5))
            st, hdrs, data = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
            self.assertEqual(st, 429, data)
            self.assertIn("retry-after", hdrs)
            assert_error_object(self, json.loads(data))
            a.close()
            b.close()
            self.assertTrue(wait_for(lambda: srv.metric("infera_kv_blocks_used") == 0, timeout=5))
            st, _, _ = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
            self.assertEqual(st, 200)

    def test_64_concurrent_streams_equal_sequential(self):
        words = ["In the beginning", "And the LORD said", "Blessed are", "The earth", "And God saw", "Now the serpent",
                 "Unto the woman", "And Adam knew"]
        prompts = [f"{words[i % 8]} {i}" for i in range(64)]
        sequential = []
        for p in prompts:
            st, b = self.srv.json("POST", "/v1/completions", {"prompt": p, "max_tokens": 16, "temperature": 0})
            self.assertEqual(st, 200)
            sequential.append(b["choices"][0]["text"])
        results = [None] * 64

        def run(i):
            _, events = sse_request(self.srv.port, "/v1/completions",
                                    {"prompt": prompts[i], "max_tokens": 16, "temperature": 0, "stream": True})
            results[i] = events

        threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        for i in range(64):
            self.assertIsNotNone(results[i], i)
            self.assertEqual(results[i][-1], "[DONE]")
            self.assertEqual(stream_text(results[i])[0], sequential[i], i)
        self.assertTrue(wait_for(lambda: self.srv.metric("infera_kv_blocks_used") == 0))


class InfillTest(unittest.TestCase):
    """llama-server's /infill on the bundled model given FIM token ids (its
    file with fim_* keys added; gguf_patch.py): the prompt is [BOS]
    [FIM_REP]myproject\n [FIM_SEP]name\n text ... [FIM_SEP]filename\n
    [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID], truncated as
    llama-server does; the answer is /completion's for those tokens. A model
    without FIM tokens answers 501."""

    FIM = {"pre": 20, "suf": 21, "mid": 22, "rep": 23, "sep": 24}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "kjv-fim.gguf")
        gguf_patch.with_int_metadata(os.path.join(REPO, "models", "kjv-7m", "kjv-7m.gguf"), cls.model,
                                     {f"tokenizer.ggml.fim_{k}_token_id": v for k, v in cls.FIM.items()})
        cls.srv = Server("--model", cls.model)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.tmp.cleanup()

    def tok(self, text):
        st, t = self.srv.json("POST", "/tokenize", {"content": text, "add_special": False})
        self.assertEqual(st, 200, t)
        return t["tokens"]

    def test_prompt_and_answer(self):
        f = self.FIM
        body = {"input_prefix": "And God said", "input_suffix": " and there was light", "prompt": " Let",
                "input_extra": [{"filename": "gen.txt", "text": "In the beginning"}], "n_predict": 6,
                "temperature": 0, "n_probs": 2}
        st, b = self.srv.json("POST", "/infill", body)
        self.assertEqual(st, 200, b)
        want = ([1, f["rep"]] + self.tok("myproject\n") + [f["sep"]] + self.tok("gen.txt\n") +
                self.tok("In the beginning") + [f["sep"]] + self.tok("filename\n") + [f["pre"]] +
                self.tok("And God said") + self.tok(" Let") + [f["suf"]] + self.tok(" and there was light") + [f["mid"]])
        # The same tokens through /completion: the same answer, token for token.
        st, c = self.srv.json("POST", "/completion", {"prompt": want, "n_predict": 6, "temperature": 0, "n_probs": 2})
        self.assertEqual(st, 200, c)
        self.assertEqual(b["tokens_evaluated"], len(want))
        self.assertEqual((b["content"], b["completion_probabilities"]), (c["content"], c["completion_probabilities"]))
        self.assertEqual(b["tokens_predicted"], 6)
        for part in ("myproject", "gen.txt", "In the beginning", "filename", "And God said", "Let", "there was light"):
            self.assertIn(part, b["prompt"])
        # Streamed as /completion streams.
        _, events = sse_request(self.srv.port, "/infill", dict(body, stream=True))
        self.assertEqual("".join(e["content"] for e in events), b["content"])
        self.assertEqual(events[-1]["stop"], True)
        # Truncation (context 1024, so a batch of 512): the prefix keeps its
        # last 384 tokens, the suffix its first 128 - 2 - 0, the extra files
        # the last 1024 - 512 - 2 * 4.
        verse = " And the earth was without form, and void; and darkness was upon the face of the deep."
        prefix, suffix, extra = verse * 30, verse * 12, verse * 30
        st, b = self.srv.json("POST", "/infill", {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 4,
                                                  "input_extra": [{"filename": "a", "text": extra}], "temperature": 0})
        self.assertEqual(st, 200, b)
        p, s = self.tok(prefix), self.tok(suffix)
        e = [f["rep"]] + self.tok("myproject\n") + [f["sep"]] + self.tok("a\n") + self.tok(extra) + [f["sep"]] + \
            self.tok("filename\n")
        self.assertGreater((len(p), len(s), len(e)), (384, 126, 504))
        want = [1] + e[-504:] + [f["pre"]] + p[-384:] + [f["suf"]] + s[:126] + [f["mid"]]
        st, c = self.srv.json("POST", "/completion", {"prompt": want, "n_predict": 4, "temperature": 0})
        self.assertEqual((b["tokens_evaluated"], b["content"]), (len(want), c["content"]))

    def test_openai_suffix(self):
        """OpenAI's suffix on /v1/completions: the prompt is the text before
        the insertion; the FIM prompt and answer are /infill's."""
        body = {"prompt": "And God said", "suffix": " and there was light", "max_tokens": 6, "temperature": 0}
        st, v1 = self.srv.json("POST", "/v1/completions", body)
        self.assertEqual(st, 200, v1)
        st, b = self.srv.json("POST", "/infill", {"input_prefix": "And God said", "input_suffix": " and there was light",
                                                  "n_predict": 6, "temperature": 0})
        self.assertEqual(v1["choices"][0]["text"], b["content"])
        self.assertEqual(v1["usage"]["prompt_tokens"], b["tokens_evaluated"])
        _, events = sse_request(self.srv.port, "/v1/completions", dict(body, stream=True))
        self.assertEqual(stream_text(events)[0], b["content"])
        st, plain = self.srv.json("POST", "/v1/completions", dict(body, suffix=""))  # empty: no insertion
        self.assertLess(plain["usage"]["prompt_tokens"], v1["usage"]["prompt_tokens"])
        for extra, param in (({"echo": True}, "echo"), ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [1, 2]}, "prompt"),
                             ({"suffix": 3}, "suffix")):
            st, e = self.srv.json("POST", "/v1/completions", dict(body, **extra))
            self.assertEqual((st, e["error"]["param"]), (400, param), extra)

    def test_errors(self):
        for body, param in (({"input_prefix": 3}, "input_prefix"), ({"input_extra": "x"}, "input_extra"),
                            ({"input_extra": [{"filename": "a", "content": "x"}]}, "input_extra"),
                            ({"input_prefix": "a", "n": 2}, "n"), ({"input_prefix": "a", "max_tokens": 0}, "max_tokens")):
            st, b = self.srv.json("POST", "/infill", body)
            self.assertEqual(st, 400, (body, b))
            assert_error_object(self, b)
            self.assertEqual(b["error"]["param"], param, body)
        self.assertEqual(self.srv.request("GET", "/infill")[0], 405)
        # The bundled model has no FIM tokens: 501, as llama-server answers.
        with Server() as srv:
            st, b = srv.json("POST", "/infill", {"input_prefix": "a", "input_suffix": "b"})
            self.assertEqual((st, b["error"]["type"]), (501, "not_supported_error"), b)
            assert_error_object(self, b, 501)
            st, b = srv.json("POST", "/v1/completions", {"prompt": "a", "suffix": "b"})
            self.assertEqual((st, b["error"]["param"]), (400, "suffix"), b)


class CorsHeadOptionsTest(unittest.TestCase):
    """--cors-origin, HEAD, OPTIONS (plain and CORS preflight) and /version."""

    @staticmethod
    def raw(port, method, path, headers=None, body=None):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def test_cors_head_options_version(self):
        origin = "https://app.example.com"
        with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
            f.write("sk-cors\n")
            f.flush()
            with Server("--cors-origin", origin, "--cors-origin", "http://localhost:3000",
                        "--api-key-file", f.name) as srv:
                auth = {"Authorization": "Bearer sk-cors"}
                # A browser preflight: no API key, 204, what the route allows.
                st, h, body = self.raw(srv.port, "OPTIONS", "/v1/chat/completions", {
                    "Origin": origin, "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
                self.assertEqual((st, body), (204, b""), h)
                self.assertNotIn("content-length", h)
                self.assertEqual(h["access-control-allow-origin"], origin)
                self.assertIn("POST", h["access-control-allow-methods"])
                self.assertEqual(h["access-control-allow-headers"], "authorization, content-type, x-stainless-os")
                self.assertEqual(h["vary"], "Origin")
                # A preflight from an origin not allowed: 403 with an error object.
                st, h, body = self.raw(srv.port, "OPTIONS", "/v1/completions", {
                    "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
                self.assertEqual(st, 403)
                assert_error_object(self, json.loads(body))
                self.assertNotIn("access-control-allow-origin", h)
                # Plain OPTIONS: 204 and Allow.
                st, h, _ = self.raw(srv.port, "OPTIONS", "/v1/models")
                self.assertEqual(st, 204)
                self.assertEqual(h["allow"], "GET, HEAD, OPTIONS")
                self.assertEqual(self.raw(srv.port, "OPTIONS", "/nowhere")[0], 404)
                # The actual request from the allowed origin carries the CORS headers.
                st, h, body = self.raw(srv.port, "POST", "/v1/completions",
                                       {**auth, "Origin": origin, "Content-Type": "application/json"},
                                       json.dumps({"prompt": "In the", "max_tokens": 2}))
                self.assertEqual(st, 200, body)
                self.assertEqual(h["access-control-allow-origin"], origin)
                self.assertIn("X-Request-Id", h["access-control-expose-headers"])
                # Other origins and same-origin requests get none.
                st, h, _ = self.raw(srv.port, "GET", "/v1/models", {**auth, "Origin": "https://evil.example"})
                self.assertEqual(st, 200)
                self.assertNotIn("access-control-allow-origin", h)
                self.assertNotIn("access-control-allow-origin", self.raw(srv.port, "GET", "/health")[1])
                # HEAD: GET's status and headers, no body.
                st_get, h_get, b_get = self.raw(srv.port, "GET", "/v1/models", auth)
                st, h, body = self.raw(srv.port, "HEAD", "/v1/models", auth)
                self.assertEqual((st, body), (st_get, b""))
                self.assertEqual(int(h["content-length"]), len(b_get))
                self.assertEqual(self.raw(srv.port, "HEAD", "/v1/models")[0], 401)
                self.assertEqual(self.raw(srv.port, "HEAD", "/health")[0], 200)
                # The connection stays usable after a HEAD (no stray body bytes).
                import http.client
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
                for method in ("HEAD", "GET", "HEAD", "GET"):
                    c.request(method, "/health")
                    r = c.getresponse()
                    self.assertEqual((r.status, len(r.read()) > 0), (200, method == "GET"))
                c.close()
                # 405 names the methods allowed.
                st, h, body = self.raw(srv.port, "DELETE", "/v1/completions", auth)
                self.assertEqual(st, 405)
                self.assertEqual(h["allow"], "POST, OPTIONS")
                assert_error_object(self, json.loads(body))
                # /version: open, like /health.
                st, h, body = self.raw(srv.port, "GET", "/version")
                self.assertEqual(st, 200)
                v = json.loads(body)
                self.assertRegex(v["version"], r"^\d+\.\d+")
                self.assertTrue(v["commit"])
        # A malformed origin is a startup error: one line, exit 2.
        from common import infera
        r = infera("serve", "--cors-origin", "app.example.com/x", "--port", "0", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--cors-origin", r.stderr.decode())


class AuthAndShutdownTest(unittest.TestCase):
    def test_bad_startup_is_one_line_and_exit_2(self):
        from common import infera
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        for args in (["--api-key-file", "/nonexistent/key"], ["--port", port], ["--port", "70000"],
                     ["--max-n", "0"], ["--model", "/nonexistent/model.gguf", "--port", "0"],
                     ["--kv-cache-type", "q3"]):
            r = infera("serve", *args, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            errors = [l for l in r.stderr.decode().splitlines() if l.startswith("infera: error:")]
            self.assertEqual(len(errors), 1, (args, r.stderr))
        busy.close()

    def test_api_key(self):
        with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
            f.write("sk-test-123\n")
            f.flush()
            with Server("--api-key-file", f.name) as srv:
                self.assertEqual(srv.json("GET", "/health")[0], 200)
                for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sk-test-123"},
                             {"Authorization": "Bearer sk-test-1234"}):
                    st, b = srv.json("GET", "/v1/models", headers=hdrs)
                    self.assertEqual(st, 401, hdrs)
                    self.assertEqual(b["error"]["code"], "invalid_api_key")
                st, b = srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2},
                                 headers={"Authorization": "Bearer sk-test-123"})
                self.assertEqual(st, 200, b)
                # Anthropic's clients send it as x-api-key; their errors come in Anthropic's shape.
                msg = {"max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
                st, b = srv.json("POST", "/v1/messages", msg, headers={"x-api-key": "sk-test-123"})
                self.assertEqual((st, b["type"]), (200, "message"), b)
                st, b = srv.json("POST", "/v1/messages", msg, headers={"x-api-key": "wrong"})
                self.assertEqual((st, b["type"], b["error"]["type"]), (401, "error", "authentication_error"), b)
                # The key never appears in the process list.
                with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as c:
                    self.assertNotIn(b"sk-test-123", c.read())

    def test_sigterm_drains_in_flight_requests(self):
        srv = Server("--drain-timeout", "300")
        try:
            results = [None] * 8
            started = threading.Barrier(9)

            def run(i):
                s, first = sse_request(srv.port, "/v1/completions",
                                       {"prompt": f"In the beginning {i}", "max_tokens": 300, "ignore_eos": True,
                                        "stream": True, "stream_options": {"include_usage": True}},
                                       read_events=1)
                started.wait(60)
                # Read the rest of the stream on the same socket.
                results[i] = read_rest(s, until=b"0\r\n\r\n")

            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            started.wait(60)
            keep_alive = __import__("http.client").client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            keep_alive.request("GET", "/health")
            keep_alive.getresponse().read()
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            # Liveness stays 200 (the process serves what is in flight);
            # readiness turns 503 so that no balancer sends more.
            keep_alive.request("GET", "/health")
            r = keep_alive.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.read())["status"], "draining")
            keep_alive.request("GET", "/ready")
            r = keep_alive.getresponse()
            self.assertEqual(r.status, 503)
            self.assertEqual(r.getheader("Retry-After"), "1")
            self.assertEqual(json.loads(r.read())["status"], "draining")
            keep_alive.close()
            for t in threads:
                t.join(120)
            for i, buf in enumerate(results):
                self.assertIsNotNone(buf, i)
                text = buf.decode(errors="replace")
                tail = text[-600:]
                self.assertIn('"finish_reason":"length"', text, (i, tail))
                self.assertIn('"completion_tokens":300', text, (i, tail))
                self.assertIn("data: [DONE]", text, (i, tail))
            self.assertEqual(srv.proc.wait(60), 0)
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
