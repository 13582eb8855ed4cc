"""KV offload tiers end to end: `infera serve` with --kv-offload-dir and
--kv-offload-redis (a real redis-server started here). A 2,000-token prefix
survives a server restart (disk, Redis) and is shared by two replicas through
one Redis, with identical greedy output; damaged blocks, another model file
and another KV type are misses, never wrong output; Redis killed under 16
concurrent streams, or a Redis that accepts connections and never answers,
fails no request."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, free_port, shared, wait_for  # noqa: E402

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
TINY = shared("models", "tiny-random-llama2", "llama-2-tiny-random.gguf")  # 4,096-token context
STORIES = shared("models", "tinystories-3m")

PREFIX = 2000
BLOCK = 16


class Redis:
    """A private redis-server on a free port (no persistence)."""

    def __init__(self, port=None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="infera-redis-")
        self.proc = subprocess.Popen([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: self.cli("PING") == "PONG", timeout=10):
            raise RuntimeError("redis-server did not start")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args):
        r = subprocess.run([REDIS_CLI, "-p", str(self.port), *args], capture_output=True, text=True, timeout=10)
        return r.stdout.strip()

    def keys(self):
        return [k for k in self.cli("--scan", "--pattern", "infera:kv:*").splitlines() if k]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def prompt_tokens(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, 31000) for _ in range(n)]


def complete(srv, tokens, max_tokens=16, timeout=120):
    st, body = srv.json("POST", "/v1/completions", {"prompt": tokens, "max_tokens": max_tokens, "temperature": 0,
                                                    "logprobs": 0}, timeout=timeout)
    assert st == 200, body
    ch = body["choices"][0]
    return {"text": ch["text"], "tokens": ch["logprobs"]["tokens"],
            "cached": body["usage"]["prompt_tokens_details"]["cached_tokens"]}


def stream(srv, tokens, max_tokens=24, timeout=120):
    """Text and finish reason of a streamed completion."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": tokens, "max_tokens": max_tokens,
                                                             "temperature": 0, "stream": True}),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    text, finish = "", None
    for raw in r.read().decode().splitlines():
        if not raw.startswith("data: ") or raw == "data: [DONE]":
            continue
        ev = json.loads(raw[6:])
        assert "error" not in ev, ev
        ch = ev["choices"][0]
        text += ch.get("text", "")
        finish = ch.get("finish_reason") or finish
    conn.close()
    return text, finish


def wait_written(srv, n, timeout=60):
    """Until the tiers hold at least n blocks written by this server."""
    def written():
        st, _, data = srv.request("GET", "/metrics")
        total = 0.0
        for line in data.decode().splitlines():
            if line.startswith("infera_kv_offload_written_blocks_total{"):
                total = max(total, float(line.rsplit(" ", 1)[1]))
        return total >= n
    assert wait_for(written, timeout=timeout, interval=0.1), "blocks were not written through"


def metric_sum(srv, name):
    st, _, data = srv.request("GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in data.decode().splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


class KvOffloadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="infera-kvoff-")
        cls.prompt = prompt_tokens(PREFIX, 1)
        with Server("-m", TINY) as plain:
            cls.expected = complete(plain, cls.prompt)
        assert cls.expected["cached"] == 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh_dir(self, name):
        d = os.path.join(self.tmp, name)
        shutil.rmtree(d, ignore_errors=True)
        return d

    def assert_resumed(self, out):
        self.assertGreaterEqual(out["cached"], PREFIX - BLOCK)
        self.assertEqual(out["tokens"], self.expected["tokens"])
        self.assertEqual(out["text"], self.expected["text"])

    def test_restart_resumes_from_disk(self):
        d = self.fresh_dir("disk")
        with Server("-m", TINY, "--kv-offload-dir", d) as srv:
            first = complete(srv, self.prompt)
            self.assertEqual(first["cached"], 0)
            self.assertEqual(first["tokens"], self.expected["tokens"])
            wait_written(srv, PREFIX // BLOCK - 1)
        self.assertGreaterEqual(len([f for f in os.listdir(d) if f.endswith(".kvb")]), PREFIX // BLOCK - 1)
        with Server("-m", TINY, "--kv-offload-dir", d) as srv:
            self.assert_resumed(complete(srv, self.prompt))
            self.assertGreaterEqual(metric_sum(srv, "infera_kv_offload_hits_total"), PREFIX // BLOCK - 1)
            self.assertGreater(metric_sum(srv, "infera_kv_offload_loaded_blocks_total"), 0)

        # Damaged files: misses, recomputed, the same output.
        for f in os.listdir(d):
            with open(os.path.join(d, f), "r+b") as fh:
                fh.seek(300)
                b = fh.read(1)
                fh.seek(300)
                fh.write(bytes([b[0] ^ 0x55]))
        with Server("-m", TINY, "--kv-offload-dir", d) as srv:
            out = complete(srv, self.prompt)
            self.assertEqual(out["cached"], 0)
            self.assertEqual(out["tokens"], self.expected["tokens"])
            self.assertGreaterEqual(metric_sum(srv, "infera_kv_offload_corrupt_blocks_total"), 1)

        # Another KV type: another fingerprint, a miss.
        with Server("-m", TINY, "--kv-offload-dir", d, "--kv-cache-type", "q8") as srv:
            self.assertEqual(complete(srv, self.prompt)["cached"], 0)

    def test_restart_resumes_from_redis_and_replicas_share_it(self):
        redis = Redis()
        try:
            with Server("-m", TINY, "--kv-offload-redis", redis.url) as a:
                self.assertEqual(complete(a, self.prompt)["cached"], 0)
                wait_written(a, PREFIX // BLOCK - 1)
                # A second replica on the same Redis, running at the same time.
                with Server("-m", TINY, "--kv-offload-redis", redis.url) as b:
                    self.assert_resumed(complete(b, self.prompt))
            self.assertGreaterEqual(len(redis.keys()), PREFIX // BLOCK - 1)
            ttl = int(redis.cli("TTL", redis.keys()[0]))
            self.assertTrue(0 < ttl <= 86400, ttl)
            with Server("-m", TINY, "--kv-offload-redis", redis.url) as srv:  # restarted
                self.assert_resumed(complete(srv, self.prompt))

            # Damage every stored block: misses, the same output.
            for k in redis.keys():
                redis.cli("SETRANGE", k, "200", "garbage")
            with Server("-m", TINY, "--kv-offload-redis", redis.url) as srv:
                out = complete(srv, self.prompt)
                self.assertEqual(out["cached"], 0)
                self.assertEqual(out["tokens"], self.expected["tokens"])
                self.assertGreaterEqual(metric_sum(srv, "infera_kv_offload_corrupt_blocks_total"), 1)
        finally:
            redis.stop()

    def test_sessions_pin_save_and_delete(self):
        redis = Redis()
        key = ["--api-key", "sekret"]
        auth = {"Authorization": "Bearer sekret"}
        try:
            args = ["-m", TINY, "--kv-offload-redis", redis.url, "--kv-offload-ttl", "3600", *key]
            turn1 = self.prompt[:1000]
            with Server(*args) as srv:
                st, body = srv.json("POST", "/v1/completions", {"prompt": turn1, "max_tokens": 8, "temperature": 0,
                                                                "session_id": "chat-42"}, headers=auth)
                self.assertEqual(st, 200, body)
                st, body = srv.json("POST", "/v1/sessions/chat-42/save")
                self.assertEqual(st, 401)
                st, body = srv.json("POST", "/v1/sessions/chat-42/save", headers=auth)
                self.assertEqual(st, 200, body)
                self.assertEqual(body["tokens"], 1000 + 8)
                self.assertEqual(body["blocks"], 1008 // BLOCK)
                self.assertEqual(body["written_blocks"], 1007 // BLOCK)  # the last token has no K/V yet
                sessions = redis.cli("--scan", "--pattern", "infera:session:*").split()
                self.assertEqual(len(sessions), 1)
                self.assertTrue(0 < int(redis.cli("TTL", sessions[0])) <= 3600)
                st, body = srv.json("POST", "/v1/sessions/unknown/save", headers=auth)
                self.assertEqual(st, 404, body)
                self.assertEqual(body["error"]["code"], "session_not_found")
                st, body = srv.json("POST", "/v1/sessions/chat-42/save", headers={**auth, "X-Session-Id": "x"})
                self.assertEqual(st, 200)
            # After a restart the session is found through its stored record.
            with Server(*args) as srv:
                st, body = srv.json("POST", "/v1/completions", {"prompt": turn1 + prompt_tokens(50, 5), "max_tokens": 4,
                                                                "temperature": 0},
                                    headers={**auth, "X-Session-Id": "chat-42"})
                self.assertEqual(st, 200, body)
                self.assertGreaterEqual(body["usage"]["prompt_tokens_details"]["cached_tokens"], 1000 - BLOCK)
                st, body = srv.json("DELETE", "/v1/sessions/chat-42", headers=auth)
                self.assertEqual(st, 200, body)
                self.assertTrue(body["deleted"])
            with Server(*args) as srv:
                st, body = srv.json("POST", "/v1/completions", {"prompt": turn1, "max_tokens": 4, "temperature": 0},
                                    headers=auth)
                self.assertLess(body["usage"]["prompt_tokens_details"]["cached_tokens"], 1000 - BLOCK)
                st, body = srv.json("POST", "/v1/completions", {"prompt": [1, 2], "session_id": "bad id"},
                                    headers=auth)
                self.assertEqual(st, 400)
        finally:
            redis.stop()

    def test_another_model_file_is_a_miss(self):
        d = self.fresh_dir("model-change")
        model = os.path.join(self.tmp, "model.gguf")
        shutil.copy(os.path.join(STORIES, "tinystories-3m-f32.gguf"), model)
        p = prompt_tokens(200, 2)
        p = [t % 500 + 10 for t in p]
        with Server("-m", model, "--kv-offload-dir", d) as srv:
            complete(srv, p)
            wait_written(srv, 200 // BLOCK - 1)
        with Server("-m", model, "--kv-offload-dir", d) as srv:
            self.assertGreaterEqual(complete(srv, p)["cached"], 192)
        shutil.copy(os.path.join(STORIES, "tinystories-3m-q8_0.gguf"), model)  # same path, other weights
        with Server("-m", model) as plain:
            want = complete(plain, p)
        with Server("-m", model, "--kv-offload-dir", d) as srv:
            out = complete(srv, p)
            self.assertEqual(out["cached"], 0)
            self.assertEqual(out["tokens"], want["tokens"])

    def test_redis_killed_under_16_streams_then_restarted(self):
        redis = Redis()
        port = redis.port
        prompts = [self.prompt[:1500] + prompt_tokens(300, 100 + i) for i in range(16)]
        with Server("-m", TINY) as plain:
            want = [stream(plain, p) for p in prompts]
        try:
            with Server("-m", TINY, "--kv-offload-redis", redis.url, "--kv-offload-timeout-ms", "300") as srv:
                complete(srv, self.prompt[:1500])
                wait_written(srv, 1500 // BLOCK - 1)
                results = [None] * 16
                errors = []

                def run(i):
                    try:
                        results[i] = stream(srv, prompts[i])
                    except Exception as e:  # noqa: BLE001
                        errors.append(repr(e))
                threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
                for t in threads:
                    t.start()
                time.sleep(0.05)
                redis.kill()  # mid-load
                for t in threads:
                    t.join(120)
                self.assertEqual(errors, [])
                self.assertEqual(results, want)
                # Redis back on the same port (empty): once the back-off
                # (at most 10 s) ends, new prefixes are written to it again.
                redis = Redis(port)
                self.assertTrue(wait_for(lambda: metric_sum(srv, "infera_kv_offload_healthy") == 1, timeout=30,
                                         interval=0.2))
                fresh = prompt_tokens(800, 77)
                complete(srv, fresh)
                self.assertTrue(wait_for(lambda: len(redis.keys()) >= 800 // BLOCK - 1, timeout=30, interval=0.2))
            with Server("-m", TINY, "--kv-offload-redis", redis.url) as srv:
                out = complete(srv, fresh)
                self.assertGreaterEqual(out["cached"], 800 - BLOCK)
        finally:
            redis.stop()

    def test_redis_that_never_answers_costs_only_the_timeout(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        conns = []
        stop = threading.Event()

        def accept():  # accepts, reads nothing, answers nothing
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conns.append(listener.accept()[0])
                except OSError:
                    pass
        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            url = f"redis://127.0.0.1:{listener.getsockname()[1]}"
            with Server("-m", TINY, "--kv-offload-redis", url, "--kv-offload-timeout-ms", "300") as srv:
                t0 = time.time()
                out = complete(srv, self.prompt, timeout=60)
                first = time.time() - t0
                self.assertEqual(out["tokens"], self.expected["tokens"])
                t0 = time.time()
                out = complete(srv, prompt_tokens(500, 9), timeout=60)
                self.assertLess(first, 10)
                self.assertLess(time.time() - t0, 10)
                self.assertGreaterEqual(metric_sum(srv, "infera_kv_offload_errors_total"), 1)
                st, health = srv.json("GET", "/health")
                self.assertEqual(st, 200)
        finally:
            stop.set()
            t.join(5)
            for c in conns:
                c.close()
            listener.close()


if __name__ == "__main__":
    unittest.main()
