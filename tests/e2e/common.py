"""Shared helpers for the end-to-end tests (run with Debian's /usr/bin/python3)."""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INFERA = os.path.abspath(os.environ.get("INFERA_BIN", os.path.join(REPO, "build", "tools", "infera")))
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(REPO, "..", "shared"))
# True when INFERA_BIN is the sanitizer build (tests/CMakeLists.txt sets it).
# Its arithmetic is the release build's, so a suite that measures model
# quality over a large input (perplexity of a whole held-out file, accuracy on
# hundreds of tasks) checks those numbers in the release run only, and under
# the sanitizers runs the same commands over a smaller input.
SANITIZED = os.environ.get("INFERA_SANITIZED") == "1"


def infera(*args, input=None, timeout=300):
    return subprocess.run([INFERA, *args], capture_output=True, timeout=timeout, input=input)


def mpi_env(under_mpirun=True):
    """The environment for mpirun: Open MPI refuses to run as root (CI
    containers) unless told that it is meant. Under mpirun the sanitizer
    build checks everything but leaks: Open MPI's plugins allocate at start
    and are unloaded (dlclose) at MPI_Finalize, leaving reports LeakSanitizer
    can attribute to no module. (The threads backend runs the same sharded
    code in one process with leak checking on.)"""
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if under_mpirun:
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    return env


def mpirun(n):
    """The mpirun prefix for n ranks on this machine (more ranks than cores
    allowed)."""
    return ["mpirun", "--oversubscribe", "-np", str(n)]


def free_port():
    """A loopback port free at the time of the call."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=10.0, interval=0.02):
    """Polls pred until it is true or timeout seconds passed; its last value."""
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def shared(*parts):
    return os.path.join(SHARED, *parts)


class Server:
    """`infera serve` on a free loopback port, for the duration of a `with`.

    stderr is drained by a thread into `self.log`; `url` is the base URL once
    the model is loaded."""

    def __init__(self, *args, wait_ready=True, timeout=120, launcher=(), threads=2, port=0):
        """launcher: a command the server runs under (mpirun ...); port: 0 for any free one."""
        import re
        import threading
        import time
        self.proc = subprocess.Popen([*launcher, INFERA, "serve", "--port", str(port), "-t", str(threads), *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=mpi_env(under_mpirun=bool(launcher)))
        self.log = []
        self.port = None
        self._ready = threading.Event()
        self._listening = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    self._listening.set()
                if "ready:" in line:
                    self._ready.set()
            self._listening.set()
            self._ready.set()
        self._thread = threading.Thread(target=drain, daemon=True)
        self._thread.start()
        deadline = time.time() + timeout
        event = self._ready if wait_ready else self._listening
        if not event.wait(max(0.0, deadline - time.time())) or self.port is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        if wait_ready and self.proc.poll() is not None:
            raise RuntimeError("server exited:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict, body bytes) of one request on a new connection."""
        import http.client
        import json as _json
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else _json.dumps(body)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        conn.close()
        return out

    def json(self, method, path, body=None, headers=None, timeout=120):
        import json as _json
        status, hdrs, data = self.request(method, path, body, headers, timeout)
        return status, _json.loads(data) if data else None

    def metric(self, name):
        status, _, data = self.request("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._thread.join(5)
        if not self._thread.is_alive():
            self.proc.stderr.close()  # (drained to its end; left open, Python warns of it)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_node_test(test, srv, script, **env):
    """Runs tests/e2e/js/`script` with Node's test runner against `srv` (its
    URL in INFERA_URL, plus `env`), fails `test` if it fails, then checks the
    server let go of every KV block and request (streams the script aborted
    included)."""
    import shutil
    import sys
    import time
    js = os.path.join(HERE, "js")
    node = shutil.which("node")
    test.assertIsNotNone(node, "Node.js is required (scripts/install-deps.sh installs it)")
    r = subprocess.run([node, "--test", "--test-reporter=spec", script], cwd=js,
                       env=dict(os.environ, INFERA_URL=srv.url, **env), capture_output=True, text=True, timeout=600)
    sys.stderr.write(r.stdout[-6000:] + r.stderr[-3000:])
    test.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-2000:])
    deadline = time.time() + 10
    while srv.metric("infera_kv_blocks_used") != 0 and time.time() < deadline:
        time.sleep(0.05)
    test.assertEqual(srv.metric("infera_kv_blocks_used"), 0)
    test.assertEqual(srv.metric("infera_num_requests_running"), 0)
