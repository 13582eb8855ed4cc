#!/usr/bin/python3
"""Replicas behind nginx (Stage 10): throughput and latency through nginx
with 1, 2 and 3 replicas, against the same single replica reached directly.

    /usr/bin/python3 bench/replicas_bench.py [--model M] [--rounds 3]
        [--concurrency 8] [--prompts 48] [--input-len 64] [--output-len 64]

Every round starts each replica set afresh and runs `infera bench-serve`
(streaming, closed loop) against it; configurations are interleaved within a
round and medians over rounds are printed (the machines are shared and
noisy). A second, tiny workload (1 generated token, one client,
non-streaming) isolates the balancer's own per-request overhead. The 2-core
machine has no room for more replicas to add speed: on it the rows measure
the cost of splitting the cores and of the extra hop, not scaling.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INFERA = os.environ.get("INFERA", os.path.join(ROOT, "build", "tools", "infera"))
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(model, threads):
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([INFERA, "serve", "-m", model, "--port", str(port), "-t", str(threads),
                             "--max-queue", "1024", "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            import urllib.request
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2).status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    log.seek(0)
    sys.exit("replica did not start: " + log.read())


def start_nginx(ports):
    d = tempfile.mkdtemp(prefix="infera-nginx-bench-")
    port = free_port()
    conf = subprocess.run([INFERA, "deploy", "nginx", "--standalone", "--worker-processes", "1", "--listen",
                           f"127.0.0.1:{port}", "--replicas", ",".join(f"127.0.0.1:{p}" for p in ports)],
                          capture_output=True, text=True, check=True).stdout
    # No access log in the measurement.
    conf = conf.replace("access_log /dev/stdout infera;", "access_log off;")
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(conf)
    proc = subprocess.Popen([NGINX, "-p", d + "/", "-c", os.path.join(d, "nginx.conf"), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port, d
        except OSError:
            time.sleep(0.05)
    sys.exit("nginx did not start")


def bench(url, args, tiny=False):
    out = tempfile.mktemp(suffix=".json")
    cmd = [INFERA, "bench-serve", "--url", url, "--json", out, "--seed", "1"]
    if tiny:
        cmd += ["--no-stream", "--concurrency", "1", "--num-prompts", "64", "--input-len", "8", "--output-len", "1"]
    else:
        cmd += ["--concurrency", str(args.concurrency), "--num-prompts", str(args.prompts), "--input-len",
                str(args.input_len), "--output-len", str(args.output_len)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        level = json.load(f)["levels"][0]
    os.unlink(out)
    if level["failed"]:
        sys.exit(f"{level['failed']} requests failed")
    return {"req_s": level["request_throughput"], "tok_s": level["output_throughput"],
            "ttft_p50": level["ttft_s"]["p50"], "ttft_p99": level["ttft_s"]["p99"],
            "e2e_p50": level["e2e_s"]["p50"], "e2e_p99": level["e2e_s"]["p99"]}


def probe_latency(port, n=2000):
    """p50 and p99 (ms) of n sequential GET /ready on one keep-alive connection:
    no model work, so the difference direct vs nginx is the hop's cost."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", "/ready")
        conn.getresponse().read()
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    return times[len(times) // 2] * 1e3, times[int(len(times) * 0.99)] * 1e3


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM if p.args[0] == INFERA else signal.SIGQUIT)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    cores = os.cpu_count()
    # name -> (replicas, threads per replica, through nginx)
    configs = {"direct, 1 replica": (1, cores, False), "nginx, 1 replica": (1, cores, True),
               "nginx, 2 replicas": (2, max(1, cores // 2), True), "nginx, 3 replicas": (3, max(1, cores // 3), True)}
    results = {name: [] for name in configs}
    tiny = {"direct": [], "nginx": []}
    probe = {"direct": [], "nginx": []}
    for rnd in range(args.rounds):
        for name, (n, threads, via_nginx) in configs.items():
            reps = [start_replica(args.model, threads) for _ in range(n)]
            procs = [p for p, _ in reps]
            url = f"http://127.0.0.1:{reps[0][1]}"
            ngx_dir = None
            if via_nginx:
                ngx, port, ngx_dir = start_nginx([p for _, p in reps])
                procs.append(ngx)
                url = f"http://127.0.0.1:{port}"
            try:
                bench(url, args)  # warm-up
                results[name].append(bench(url, args))
                if n == 1:
                    key = "nginx" if via_nginx else "direct"
                    tiny[key].append(bench(url, args, tiny=True))
                    probe[key].append(probe_latency(int(url.rsplit(":", 1)[1])))
            finally:
                stop(procs)
                if ngx_dir:
                    shutil.rmtree(ngx_dir, ignore_errors=True)
            print(f"round {rnd + 1}: {name}: {results[name][-1]['tok_s']:.0f} tok/s", file=sys.stderr)

    cpu = "?"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    print(f"\nCPU: {cpu}, {cores} cores; model {os.path.basename(os.path.realpath(args.model))}; "
          f"streaming, concurrency {args.concurrency}, {args.prompts} requests of {args.input_len} in / "
          f"{args.output_len} out; medians of {args.rounds} rounds\n")
    print("| setup | req/s | output tok/s | TTFT p50 / p99 (ms) | end-to-end p50 / p99 (ms) | tok/s vs direct (median of per-round ratios) |")
    print("|---|---|---|---|---|---|")
    direct = results["direct, 1 replica"]
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        # Each round's ratio to the direct run of the same round, then the
        # median: steadier than a ratio of medians on a noisy machine.
        ratio = statistics.median(r["tok_s"] / d["tok_s"] for r, d in zip(rs, direct))
        print(f"| {name} | {med['req_s']:.2f} | {med['tok_s']:.0f} | {med['ttft_p50'] * 1e3:.0f} / "
              f"{med['ttft_p99'] * 1e3:.0f} | {med['e2e_p50'] * 1e3:.0f} / {med['e2e_p99'] * 1e3:.0f} | "
              f"{ratio:.2f}x |")
    d = statistics.median(r["e2e_p50"] for r in tiny["direct"]) * 1e3
    n = statistics.median(r["e2e_p50"] for r in tiny["nginx"]) * 1e3
    print(f"\nOne-token requests, one client: direct p50 {d:.2f} ms, through nginx p50 {n:.2f} ms "
          f"({n - d:+.2f} ms)")
    pd = [statistics.median(p[i] for p in probe["direct"]) for i in (0, 1)]
    pn = [statistics.median(p[i] for p in probe["nginx"]) for i in (0, 1)]
    print(f"GET /ready on a keep-alive connection (no model work: the hop's own cost): direct p50 / p99 "
          f"{pd[0]:.3f} / {pd[1]:.3f} ms, through nginx {pn[0]:.3f} / {pn[1]:.3f} ms ({pn[0] - pd[0]:+.3f} ms at p50)")


if __name__ == "__main__":
    main()
