"""Replicas behind nginx (Stage 10), with real processes: three `infera serve`
replicas and nginx running the configuration `infera deploy nginx` writes.

- failover: kill -9 a replica under streaming and non-streaming load; only
  streams that were already coming from it fail (cleanly), nginx stops trying
  it, and it rejoins when restarted;
- rolling restart: SIGTERM, restart and wait for /ready, one replica after
  another, under load: zero failed requests;
- session affinity: a session's turns land on one replica and hit its prefix
  cache;
- overload: a full replica's 429 is retried elsewhere; with every replica
  full, clients get 429/503 with Retry-After, never a hang.
"""
import http.client
import json
import os
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
from common import INFERA, REPO, SANITIZED, Server, free_port, wait_for  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def cli(*args):
    """infera's exit code and text output."""
    return subprocess.run([INFERA, *args], capture_output=True, text=True, timeout=60)


class Replica:
    """One `infera serve` that can be killed and restarted on the same port."""

    def __init__(self, *args):
        self.args = args
        self.server = Server(*args, threads=1)
        self.port = self.server.port

    def addr(self):
        return f"127.0.0.1:{self.port}"

    def restart(self):
        self.server.stop()
        # Same port: nginx's configuration names it.
        self.server = Server(*self.args, threads=1, port=self.port)
        assert self.server.port == self.port

    def ready(self):
        try:
            return self.server.request("GET", "/ready", timeout=5)[0] == 200
        except OSError:
            return False

    def counter(self, name, **labels):
        """Sum of a counter's samples whose labels include `labels`."""
        _, _, data = self.server.request("GET", "/metrics")
        total = 0.0
        for line in data.decode().splitlines():
            if not line.startswith(name):
                continue
            key, value = line.rsplit(" ", 1)
            if key != name and not key.startswith(name + "{"):
                continue
            if all(f'{k}="{v}"' in key for k, v in labels.items()):
                total += float(value)
        return total


class Nginx:
    """nginx in the foreground with `infera deploy nginx --standalone`."""

    def __init__(self, replicas, *flags):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="infera-nginx-")
        conf = cli("deploy", "nginx", "--standalone", "--upstream-header", "--worker-processes", "1", "--listen",
                      f"127.0.0.1:{self.port}", "--replicas", ",".join(r.addr() for r in replicas), *flags)
        assert conf.returncode == 0, conf.stderr
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf.stdout)
        self.log_path = os.path.join(self.dir, "error.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([NGINX, "-p", self.dir + "/", "-c", self.conf, "-g", "daemon off;"],
                                         stdout=subprocess.DEVNULL, stderr=log)
        ok = wait_for(self._accepts, 10)
        if not ok:
            self.proc.kill()
            self.proc.wait()
            with open(self.log_path) as f:
                raise RuntimeError("nginx did not start: " + f.read())

    def _accepts(self):
        if self.proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def log_tail(self, n=4000):
        with open(self.log_path) as f:
            text = f.read()
        with open("/tmp/nginx_last.log", "w") as f:
            f.write(text)
        return text[:3000] + " ... " + text[-1000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def post(self, path, body, headers=None, timeout=60):
        """(status, headers, body) of a non-streaming request through nginx."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def stream(self, body, timeout=60):
        """A streaming completion through nginx. Returns a dict: status,
        upstream, got_bytes (any response byte arrived), done ([DONE] seen),
        error (None, or why the stream ended early)."""
        out = {"status": None, "upstream": None, "got_bytes": False, "done": False, "error": None}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            out["status"] = r.status
            out["got_bytes"] = True
            out["upstream"] = r.getheader("X-Infera-Upstream")
            if r.status != 200:
                r.read()
                return out
            while True:
                line = r.readline()
                if not line:
                    out["error"] = "stream ended without [DONE]"
                    return out
                if line.strip() == b"data: [DONE]":
                    r.read()
                    out["done"] = True
                    return out
        except (OSError, http.client.HTTPException) as e:
            out["error"] = f"{type(e).__name__}: {e}"
            return out
        finally:
            conn.close()


class Load:
    """Clients sending requests through nginx in a loop until stopped; each
    outcome is recorded with its start time."""

    def __init__(self, nginx, clients=4, max_tokens=48):
        self.nginx = nginx
        self.results = []  # (t_start, kind, outcome dict)
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i, max_tokens), daemon=True) for i in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self, i, max_tokens):
        n = 0
        while not self.stop_flag.is_set():
            n += 1
            body = {"prompt": f"And the Lord said unto {i} {n}", "max_tokens": max_tokens, "ignore_eos": True,
                    "temperature": 0}
            t0 = time.time()
            if (i + n) % 2 == 0:
                out = self.nginx.stream(body)
                kind = "stream"
            else:
                out = {"status": None, "upstream": None, "got_bytes": False, "error": None}
                try:
                    status, hdrs, data = self.nginx.post("/v1/completions", body)
                    out.update(status=status, upstream=hdrs.get("x-infera-upstream"), got_bytes=True)
                    if status == 200:
                        json.loads(data)["choices"][0]["text"]
                except (OSError, http.client.HTTPException, ValueError) as e:
                    out["error"] = f"{type(e).__name__}: {e}"
                kind = "plain"
            out["t_end"] = time.time()
            with self.lock:
                self.results.append((t0, kind, out))

    def finish(self, timeout=120):
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), "a client hung"
        return self.results


def failed(out):
    return out["error"] is not None or out["status"] != 200


class DeployConfigTest(unittest.TestCase):
    def test_checked_in_config_is_the_generated_one(self):
        path = os.path.join(REPO, "deploy", "nginx", "infera.conf")
        # The file's header gives the command that wrote it (its second line).
        with open(path) as f:
            lines = f.read().splitlines()
        cmd = lines[1].lstrip("# ").split()
        self.assertEqual(cmd[:3], ["infera", "deploy", "nginx"])
        r = cli(*cmd[1:])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), r.stdout, "deploy/nginx/infera.conf differs from what the generator writes")

    def test_header_reproduces_the_command(self):
        first = cli("deploy", "nginx", "--replicas", "10.0.0.1:80,10.0.0.2:80", "--listen", "127.0.0.1:9000",
                    "--no-affinity", "--tries", "2", "--fail-timeout", "5", "--max-body-bytes", "1048576",
                    "--upstream-header", "--standalone", "--worker-processes", "2")
        self.assertEqual(first.returncode, 0, first.stderr)
        cmd = first.stdout.splitlines()[1].lstrip("# ").split()
        again = cli(*cmd[1:])
        self.assertEqual(again.stdout, first.stdout)
        self.assertIn("client_max_body_size 1048576;", first.stdout)
        self.assertIn("proxy_next_upstream_tries 2;", first.stdout)
        self.assertIn("add_header X-Infera-Upstream", first.stdout)
        self.assertNotIn("hash $infera_affinity_key", first.stdout)
        plain = cli("deploy", "nginx", "--replicas", "10.0.0.1:80")
        self.assertNotIn("X-Infera-Upstream", plain.stdout)
        self.assertIn("hash $infera_affinity_key consistent;", plain.stdout)

    def test_configs_pass_nginx_t(self):
        with tempfile.TemporaryDirectory() as d:
            for flags in ([], ["--no-affinity"]):
                conf = cli("deploy", "nginx", "--standalone", "--replicas", "127.0.0.1:9001,[::1]:9002,replica-3:80",
                              *flags)
                self.assertEqual(conf.returncode, 0, conf.stderr)
                with open(os.path.join(d, "a.conf"), "w") as f:
                    f.write(conf.stdout)
                t = subprocess.run([NGINX, "-t", "-p", d + "/", "-c", os.path.join(d, "a.conf")],
                                   capture_output=True, text=True)
                # replica-3 does not resolve here; everything else must pass.
                self.assertTrue(t.returncode == 0 or "host not found in upstream \"replica-3:80\"" in t.stderr,
                                t.stderr)
            # The include-form file inside Debian's http {}.
            snippet = os.path.join(REPO, "deploy", "nginx", "infera.conf")
            with open(os.path.join(d, "main.conf"), "w") as f:
                f.write(f"pid {d}/nginx.pid;\nerror_log stderr;\nevents {{}}\nhttp {{\n"
                        f"client_body_temp_path {d}/cb; proxy_temp_path {d}/px;\ninclude {snippet};\n}}\n")
            t = subprocess.run([NGINX, "-t", "-p", d + "/", "-c", os.path.join(d, "main.conf")],
                               capture_output=True, text=True)
            self.assertTrue(t.returncode == 0 or "open() \"/var/log/nginx/infera.access.log\"" in t.stderr, t.stderr)

    def test_model_folder_with_one_gguf(self):
        # A mounted volume or KServe's /mnt/models: a folder with one .gguf.
        model = os.path.join(REPO, "models", "default.gguf")
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.realpath(model), os.path.join(d, "m.gguf"))
            r = cli("run", "-m", d, "-p", "In the beginning", "-n", "3", "--temp", "0")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertGreater(len(r.stdout), len("In the beginning"))
            os.symlink(os.path.realpath(model), os.path.join(d, "n.gguf"))
            r = cli("run", "-m", d, "-p", "x", "-n", "1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("folder holds 2 GGUF files", r.stderr)

    def test_bad_arguments(self):
        for args in (["--replicas", "nohost"], ["--replicas", "a:0"], ["--replicas", "a:1,"], ["--replicas", "a b:1"],
                     ["--replicas", "a:1", "--listen", "x:y"], ["--replicas", "a:1", "--tries", "0"], []):
            r = cli("deploy", "nginx", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertEqual(r.stdout, "")
        r = cli("deploy")
        self.assertEqual(r.returncode, 2)


class ReplicaSetTest(unittest.TestCase):
    FAIL_TIMEOUT = 3

    def start(self, n=3, replica_args=(), nginx_flags=()):
        self.replicas = [Replica(*replica_args) for _ in range(n)]
        self.nginx = Nginx(self.replicas, "--max-fails", "1", "--fail-timeout", str(self.FAIL_TIMEOUT),
                           *nginx_flags)

    def tearDown(self):
        if getattr(self, "load", None):
            self.load.stop_flag.set()
        if getattr(self, "nginx", None):
            self.nginx.stop()
        for r in getattr(self, "replicas", []):
            r.server.stop()

    def test_failover_kill9(self):
        self.start()
        victim = self.replicas[1]
        load = self.load = Load(self.nginx, clients=6, max_tokens=64)
        time.sleep(3)
        t_kill = time.time()
        victim.server.proc.kill()
        victim.server.proc.wait()
        time.sleep(self.FAIL_TIMEOUT + 2)
        victim.restart()
        t_back = time.time()
        # It rejoins: nginx tries it again after fail_timeout and it answers.
        served_before = victim.counter("infera_http_requests_total", endpoint="/v1/completions")
        self.assertTrue(wait_for(lambda: victim.counter("infera_http_requests_total",
                                                           endpoint="/v1/completions") > served_before,
                                   self.FAIL_TIMEOUT + 20), "the restarted replica got no requests")
        rejoin_s = time.time() - t_back
        results = load.finish()
        streams_cut = 0
        for t0, kind, out in results:
            if not failed(out):
                continue
            # Only a stream that had started from the victim may fail, and
            # only with a cut stream (never an error status or a hang).
            self.assertTrue(out["got_bytes"] and out["status"] == 200 and kind == "stream", (kind, out))
            self.assertEqual(out["upstream"].split(", ")[-1], victim.addr(), out)
            self.assertLess(t0, t_kill, out)
            self.assertLess(out["t_end"] - t_kill, 30, "a cut stream hung")
            streams_cut += 1
        ok = [o for _, _, o in results if not failed(o)]
        self.assertGreater(len(ok), 20)
        # While it was down, nginx stopped sending to it within fail_timeout:
        # of the requests that started in the window, at most one tried it.
        window = [o for t0, _, o in results if t_kill + 0.5 < t0 < t_kill + self.FAIL_TIMEOUT - 0.5]
        tried = [o for o in window if o["upstream"] and victim.addr() in o["upstream"]]
        self.assertLessEqual(len(tried), 1, tried)
        print(f"\nfailover: {len(results)} requests, {streams_cut} streams cut by kill -9, "
              f"0 other failures; rejoined {rejoin_s:.1f} s after restart", file=sys.stderr)

    def test_rolling_restart(self):
        """deploy/systemd/rolling-restart.sh itself, with `systemctl restart
        infera@PORT` answered by this test: SIGTERM (drain), wait for the
        exit, start again on the same port."""
        self.start()
        exits = {}
        sock_dir = tempfile.mkdtemp(prefix="infera-systemctl-")
        sock_path = os.path.join(sock_dir, "supervisor.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(sock_path)
        listener.listen(1)

        def supervise():
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    words = conn.recv(256).decode().split()
                    if words[:1] != ["restart"] or not words[1].startswith("infera@"):
                        conn.sendall(b"unknown unit\n")
                        continue
                    port = int(words[1].split("@", 1)[1].removesuffix(".service"))
                    r = next(r for r in self.replicas if r.port == port)
                    r.server.proc.send_signal(signal.SIGTERM)
                    exits[port] = r.server.proc.wait(60)
                    r.restart()
                    conn.sendall(b"ok\n")
        supervisor = threading.Thread(target=supervise, daemon=True)
        supervisor.start()
        with open(os.path.join(sock_dir, "systemctl"), "w") as f:
            f.write(f"""#!/usr/bin/python3
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({sock_path!r})
s.sendall(" ".join(sys.argv[1:]).encode())
sys.exit(0 if s.recv(64) == b"ok\\n" else 1)
""")
        os.chmod(os.path.join(sock_dir, "systemctl"), 0o755)
        load = self.load = Load(self.nginx, clients=4, max_tokens=48)
        time.sleep(1.5)
        try:
            script = subprocess.run(
                ["bash", os.path.join(REPO, "deploy", "systemd", "rolling-restart.sh"), "--fail-timeout",
                 str(self.FAIL_TIMEOUT + 1), *[str(r.port) for r in self.replicas]],
                env={**os.environ, "PATH": sock_dir + os.pathsep + os.environ["PATH"]},
                capture_output=True, text=True, timeout=300)
        finally:
            listener.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
        results = load.finish()
        self.assertEqual(script.returncode, 0, script.stderr)
        # Each replica drained and exited cleanly, in turn.
        self.assertEqual(exits, {r.port: 0 for r in self.replicas})
        bad = [(kind, o) for _, kind, o in results if failed(o)]
        self.assertEqual(bad[:3], [], f"{len(bad)} failed of {len(results)}; nginx: {self.nginx.log_tail()}")
        self.assertGreater(len(results), 20)
        # Every replica served after its restart.
        for r in self.replicas:
            self.assertGreater(r.counter("infera_http_requests_total", endpoint="/v1/completions", status="200"), 0)

    def chat_sessions(self, n_sessions, turns, salt, use_header):
        """Runs n multi-turn chats sequentially turn by turn; returns
        {session: [replica address per turn]}."""
        where = {}
        history = {s: [{"role": "system", "content": f"You are scribe {salt}-{s}. Answer in the words of the "
                                                      f"King James Bible, plainly and at length."}]
                   for s in range(n_sessions)}
        for turn in range(turns):
            for s in range(n_sessions):
                history[s].append({"role": "user", "content": f"Tell me of the {turn} days of {salt} {s}."})
                body = {"messages": history[s], "max_tokens": 12, "temperature": 0}
                headers = {}
                if use_header(s):
                    headers["X-Session-Id"] = f"{salt}-{s}"
                else:
                    body["user"] = f"user-{salt}-{s}"
                status, hdrs, data = self.nginx.post("/v1/chat/completions", body, headers)
                self.assertEqual(status, 200, data)
                history[s].append(json.loads(data)["choices"][0]["message"])
                where.setdefault(s, []).append(hdrs["x-infera-upstream"])
        return where

    def hit_rate(self, before):
        hits = sum(r.counter("infera_prefix_cache_hits_total") for r in self.replicas) - before[0]
        queries = sum(r.counter("infera_prefix_cache_queries_total") for r in self.replicas) - before[1]
        return hits / queries

    def cache_totals(self):
        return (sum(r.counter("infera_prefix_cache_hits_total") for r in self.replicas),
                sum(r.counter("infera_prefix_cache_queries_total") for r in self.replicas))

    def test_session_affinity(self):
        self.start()
        before = self.cache_totals()
        # Half the sessions say who they are by header, half by "user".
        # (10 sessions under the sanitizers, common.SANITIZED, 20 otherwise.)
        sessions = 10 if SANITIZED else 20
        where = self.chat_sessions(sessions, 3, "a", use_header=lambda s: s % 2 == 0)
        with_affinity = self.hit_rate(before)
        for s, addrs in where.items():
            self.assertEqual(len(set(addrs)), 1, (s, addrs))
        used = {addrs[0] for addrs in where.values()}
        self.assertGreaterEqual(len(used), 2, "consistent hashing put every session on one replica")
        for r in self.replicas:
            if r.addr() in used:
                self.assertGreater(r.counter("infera_prefix_cache_hits_total"), 0, r.addr())
        # The same chats without affinity (least connections): turns scatter.
        self.nginx.stop()
        self.nginx = Nginx(self.replicas, "--no-affinity")
        before = self.cache_totals()
        where = self.chat_sessions(sessions, 3, "b", use_header=lambda s: s % 2 == 0)
        without = self.hit_rate(before)
        scattered = sum(len(set(a)) > 1 for a in where.values())
        print(f"\nprefix-cache hit rate: {with_affinity:.2f} with affinity, {without:.2f} without "
              f"({scattered}/{sessions} sessions spread over replicas)", file=sys.stderr)
        self.assertGreater(scattered, 0)
        self.assertGreater(with_affinity, without)

    def run_clients(self, client, n):
        """Runs `client` on n threads at once; fails if one hangs."""
        threads = [threading.Thread(target=client) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
            self.assertFalse(t.is_alive(), "a request hung")

    def test_overload(self):
        # Replica 0 is small (one sequence at a time, one waiting); the others
        # are roomy: a request 0 refuses with 429 is retried on another.
        small = ("--max-num-seqs", "1", "--max-queue", "1", "--ready-max-waiting", "0")
        self.replicas = [Replica(*small), Replica(), Replica()]
        self.nginx = Nginx(self.replicas, "--max-fails", "0")
        body = {"prompt": "And it came to pass", "max_tokens": 160, "ignore_eos": True}
        outcomes = []

        def client():
            outcomes.append(self.nginx.post("/v1/completions", body, timeout=120)[0])
        self.run_clients(client, 12)
        self.assertEqual(outcomes, [200] * 12)
        self.assertGreater(self.replicas[0].counter("infera_http_requests_total", status="429"), 0,
                           "the small replica never refused: the test did not overload it")

        # /ready says "overloaded" while a request waits there. One burst makes
        # a single waiting window of one 160-token generation (tens of ms),
        # which a poller on a busy machine can miss (it did, in CI). So three
        # clients keep the small replica busy directly, each sending again as
        # soon as it is answered: one request runs, one waits, the rest are
        # refused, and a request is waiting most of the time, until /ready has
        # said so (or 60 s pass).
        server = self.replicas[0].server
        stop = threading.Event()
        errors = []

        def hammer():
            while not stop.is_set():
                try:
                    st, _, data = server.request("POST", "/v1/completions", body, timeout=60)
                    if st == 429:
                        time.sleep(0.002)  # (a refusal is instant: no busy loop)
                    elif st != 200:
                        errors.append((st, data))
                except (OSError, http.client.HTTPException) as e:
                    errors.append(str(e))
        hammers = [threading.Thread(target=hammer) for _ in range(3)]
        for t in hammers:
            t.start()
        seen = []
        deadline = time.time() + 60
        try:
            while time.time() < deadline:
                st, _, data = server.request("GET", "/ready", timeout=10)
                seen.append(st)
                if st == 503:
                    ready = json.loads(data)
                    self.assertEqual(ready["status"], "overloaded", ready)
                    self.assertGreater(ready["waiting"], ready["max_waiting"], ready)
                    break
                time.sleep(0.005)
        finally:
            stop.set()
            for t in hammers:
                t.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(seen[-1:], [503], f"/ready never said overloaded in {len(seen)} polls")
        # Once nothing waits, it is ready again.
        self.assertTrue(wait_for(self.replicas[0].ready, 30), "/ready did not recover")

    def test_overload_everywhere(self):
        small = ("--max-num-seqs", "1", "--max-queue", "1")
        self.start(replica_args=small)
        body = {"prompt": "And it came to pass", "max_tokens": 48, "ignore_eos": True}
        outcomes = []

        def client():
            t0 = time.time()
            try:
                st, hdrs, data = self.nginx.post("/v1/completions", body, timeout=120)
                outcomes.append((st, hdrs.get("retry-after"), json.loads(data), time.time() - t0))
            except (OSError, http.client.HTTPException) as e:
                outcomes.append((None, None, str(e), time.time() - t0))
        self.run_clients(client, 24)
        refused = [o for o in outcomes if o[0] != 200]
        self.assertGreater(len(refused), 0, "nothing was refused: not overloaded")
        self.assertGreater(len(outcomes) - len(refused), 0)
        for st, retry_after, data, _ in refused:
            self.assertIn(st, (429, 503), data)
            self.assertIsNotNone(retry_after, data)
            self.assertIn("error", data)


if __name__ == "__main__":
    if not os.path.exists(NGINX):
        sys.exit("nginx is not installed: run scripts/install-deps.sh")
    unittest.main()
