#!/usr/bin/env python3
"""Time to first token with a cached prefix served from each KV tier (issue
19): for each model and prefix length, a prompt of PREFIX cached tokens plus
a fresh 16-token suffix, answered (max_tokens 1) by `infera serve` with

  cold   no tier, nothing cached: the whole prompt is computed
  ram    the prefix in the RAM prefix cache (same server, second request)
  disk   --kv-offload-dir only, server restarted (RAM empty): prefix from disk
  redis  --kv-offload-redis only (a local redis-server), server restarted
  disk-q8, redis-q8 (with --q8)  the same with --kv-offload-type q8 (int8
         rows: a quarter of the bytes; loaded K/V approximate)

ROUNDS rounds, each with fresh suffixes; prints per-case median seconds and
the cold / tier ratios, and one JSON line per measurement to OUT.

  /usr/bin/python3 bench/kv_offload_ttft.py MODEL:PREFIX[,PREFIX...] ... [--rounds 3] [--out results.jsonl]
e.g.
  /usr/bin/python3 bench/kv_offload_ttft.py /tmp/m/m360-q4_0.gguf:2000,8000 /tmp/pb/m1b-q4_0.gguf:2000
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from common import Server  # noqa: E402
from test_kv_offload import Redis  # noqa: E402

SUFFIX = 16


def ask(srv, tokens):
    t0 = time.perf_counter()
    st, body = srv.json("POST", "/v1/completions", {"prompt": tokens, "max_tokens": 1, "temperature": 0},
                        timeout=1800)
    dt = time.perf_counter() - t0
    assert st == 200, body
    return dt, body["usage"]["prompt_tokens_details"]["cached_tokens"]


def wait_written(srv, n):
    deadline = time.time() + 600
    while time.time() < deadline:
        st, _, data = srv.request("GET", "/metrics")
        w = sum([float(l.rsplit(" ", 1)[1]) for l in data.decode().splitlines()
                 if l.startswith("infera_kv_offload_written_blocks_total{")])
        if w >= n:
            return
        time.sleep(0.2)
    raise RuntimeError("blocks not written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="MODEL:PREFIX[,PREFIX...]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="kv_offload_ttft.jsonl")
    ap.add_argument("--q8", action="store_true", help="also the disk and Redis tiers with --kv-offload-type q8")
    a = ap.parse_args()
    rows = []
    out = open(a.out, "a")
    tmp = tempfile.mkdtemp(prefix="infera-ttft-")
    redis = Redis()
    try:
        for case in a.cases:
            model, lens = case.rsplit(":", 1)
            for n in [int(x) for x in lens.split(",")]:
                ctx = str(n + SUFFIX + 16)
                base = ["-m", model, "--max-model-len", ctx]
                for r in range(a.rounds):
                    rng = random.Random(r * 1000 + n)
                    prefix = [rng.randrange(100, 31000) for _ in range(n)]
                    suffix = lambda: [rng.randrange(100, 31000) for _ in range(SUFFIX)]  # noqa: E731
                    d = os.path.join(tmp, "disk")
                    shutil.rmtree(d, ignore_errors=True)
                    redis.cli("FLUSHALL")
                    tiers = ["--kv-offload-dir", d, "--kv-offload-redis", redis.url]
                    got = {}
                    with Server(*base, *tiers, threads=a.threads, timeout=600) as srv:
                        got["cold"] = ask(srv, prefix + suffix())  # computes and writes through
                        got["ram"] = ask(srv, prefix + suffix())
                        wait_written(srv, 2 * (n // 16) - 2)  # both tiers
                    with Server(*base, "--kv-offload-dir", d, threads=a.threads, timeout=600) as srv:
                        got["disk"] = ask(srv, prefix + suffix())
                    with Server(*base, "--kv-offload-redis", redis.url, threads=a.threads, timeout=600) as srv:
                        got["redis"] = ask(srv, prefix + suffix())
                    if a.q8:
                        q8 = ["--kv-offload-type", "q8"]
                        with Server(*base, *tiers, *q8, threads=a.threads, timeout=600) as srv:
                            ask(srv, prefix + suffix())
                            wait_written(srv, 2 * (n // 16) - 2)
                        with Server(*base, "--kv-offload-dir", d, *q8, threads=a.threads, timeout=600) as srv:
                            got["disk-q8"] = ask(srv, prefix + suffix())
                        with Server(*base, "--kv-offload-redis", redis.url, *q8, threads=a.threads,
                                    timeout=600) as srv:
                            got["redis-q8"] = ask(srv, prefix + suffix())
                    for k, (dt, cached) in got.items():
                        row = dict(model=os.path.basename(model), prefix=n, case=k, seconds=dt, cached=cached,
                                   round=r)
                        rows.append(row)
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                        print(json.dumps(row), flush=True)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    cases = [c for c in ("cold", "ram", "disk", "redis", "disk-q8", "redis-q8") if any(r["case"] == c for r in rows)]
    print("| model | prefix | " + " | ".join(f"{c} s" for c in cases) + " | " +
          " | ".join(f"cold/{c}" for c in cases[1:]) + " |")
    print("|---|---|" + "---|" * (2 * len(cases) - 1))
    keys = dict.fromkeys((r["model"], r["prefix"]) for r in rows)
    for m, n in keys:
        med = {c: statistics.median(r["seconds"] for r in rows if (r["model"], r["prefix"], r["case"]) == (m, n, c))
               for c in cases}
        print(f"| {m} | {n} | " + " | ".join(f"{med[c]:.3f}" for c in cases) + " | " +
              " | ".join(f"{med['cold'] / med[c]:.1f}x" for c in cases[1:]) + " |")


if __name__ == "__main__":
    main()
