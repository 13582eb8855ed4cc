#!/usr/bin/env python3
"""Multi-turn chat with sessions (issue 19): SESSIONS concurrent conversations
of TURNS turns each against `infera serve`; every turn re-sends the whole
conversation as text (previous turns' messages and replies, as a chat
client does) plus a new user message, with the conversation's `session_id`. The RAM KV cache is made
smaller than the working set (--kv-cache-mb), so without tiers evicted
prefixes are recomputed; with them (--kv-offload-dir and/or a local Redis)
they are loaded back. Prints throughput and TTFT p50/p99 per configuration.

  /usr/bin/python3 bench/multiturn_sessions.py [--model M] [--sessions 64] [--turns 20] [--user 24]
      [--reply 16] [--kv-cache-mb 32] [--max-num-seqs 8] [--configs none,disk,redis]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from common import Server  # noqa: E402
from test_kv_offload import Redis  # noqa: E402


WORDS = ("the and of to in that he shall for unto his i a lord they be is him not them it with all thou thy was "
         "god which my me said but ye their have will thee from as are when this out were by upon man").split()


def turn(port, text, reply, session):
    """(ttft seconds, reply text, cached tokens, prompt tokens) of one streamed turn."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": text, "max_tokens": reply, "temperature": 0, "ignore_eos": True, "stream": True,
            "session_id": session, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    ttft, out, cached, prompt = None, "", 0, 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        assert "error" not in ev, ev
        if ev.get("usage"):
            cached = (ev["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            prompt = ev["usage"].get("prompt_tokens", 0)
        for ch in ev.get("choices", []):
            if ch.get("text") and ttft is None:
                ttft = time.perf_counter() - t0
            out += ch.get("text", "")
    conn.close()
    return ttft or (time.perf_counter() - t0), out, cached, prompt


def run(srv, a):
    ttfts, cached, lock = [], [0, 0], threading.Lock()
    t0 = time.perf_counter()

    def session(i):
        conv = ""
        r = random.Random(i)
        for _ in range(a.turns):
            conv += "\n" + " ".join(r.choice(WORDS) for _ in range(a.user)) + "\n"
            ttft, out, c, p = turn(srv.port, conv, a.reply, f"s{i}")
            conv += out
            with lock:
                ttfts.append(ttft)
                cached[0] += c
                cached[1] += p
    threads = [threading.Thread(target=session, args=(i,)) for i in range(a.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = statistics.quantiles(ttfts, n=100)
    return {"turns": len(ttfts), "wall_s": wall, "turns_per_s": len(ttfts) / wall, "ttft_p50": q[49],
            "ttft_p99": q[98], "cached_share": cached[0] / max(1, cached[1])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--user", type=int, default=24, help="words per user message")
    ap.add_argument("--reply", type=int, default=16)
    ap.add_argument("--kv-cache-mb", default="32")
    ap.add_argument("--configs", default="none,disk,redis")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-num-seqs", default="8", help="sequences the engine runs at once (the rest wait)")
    a = ap.parse_args()
    model = ["-m", a.model] if a.model else []
    tmp = tempfile.mkdtemp(prefix="infera-multiturn-")
    redis = Redis()
    results = {}
    try:
        for cfg in a.configs.split(","):
            tiers = {"none": [], "disk": ["--kv-offload-dir", os.path.join(tmp, "disk")],
                     "redis": ["--kv-offload-redis", redis.url]}[cfg]
            with Server(*model, "--kv-cache-mb", a.kv_cache_mb, "--max-num-seqs", a.max_num_seqs, *tiers,
                        threads=a.threads, timeout=600) as srv:
                results[cfg] = run(srv, a)
                print(cfg, json.dumps(results[cfg]), flush=True)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| tiers | turns/s | TTFT p50 s | TTFT p99 s | prompt tokens served from cache |")
    print("|---|---|---|---|---|")
    for cfg, r in results.items():
        print(f"| {cfg} | {r['turns_per_s']:.2f} | {r['ttft_p50']:.3f} | {r['ttft_p99']:.3f} | "
              f"{100 * r['cached_share']:.0f} % |")


if __name__ == "__main__":
    main()
