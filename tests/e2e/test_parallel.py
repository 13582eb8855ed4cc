"""Tensor and pipeline parallelism through the CLI: `mpirun -np N infera
generate|serve --tp T --pp P` (one process per rank, Open MPI) and the same
with ranks as threads (--parallel-backend threads) give the single process's
greedy outputs for 32 varied prompts batched through the engine, on the
bundled model and the tinystories-3m fixture; the server's split run serves
the OpenAI API (streaming too) and shuts down cleanly on SIGUSR1 (what
mpirun forwards as is); layouts the
model cannot take are refused with one line on stderr and exit code 2; a
worker rank killed or hung mid-request ends it with 503 within seconds and the
job exits non-zero (then a restarted group serves again)."""
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import INFERA, Server, mpi_env, mpirun, shared  # noqa: E402
import subprocess  # noqa: E402

HAVE_MPI = shutil.which("mpirun") is not None
TINY = shared("models", "tinystories-3m", "tinystories-3m-f32.gguf")
TINY_Q8 = shared("models", "tinystories-3m", "tinystories-3m-q8_0.gguf")


def prompts(n=32):
    words = ["And it came to pass", "In the beginning", "The LORD said unto", "once upon a time there was",
             "the little dog", "she looked at the sky and", "Thou shalt not", "and the king"]
    out = []
    for i in range(n):
        p = words[i % len(words)]
        p += " " + " ".join(words[(i * 3 + k) % len(words)].split()[0] for k in range(i % 5))
        out.append(p)
    return out


def run(cmd, timeout=300):
    under_mpirun = cmd[0] in ("mpirun", "ip")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env(under_mpirun))


class GenerateSplit(unittest.TestCase):
    """generate (offline batch, 32 prompts together) split several ways."""

    def generate(self, model, extra, launcher=()):
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                for p in prompts():
                    f.write(json.dumps({"prompt": p, "max_tokens": 20, "temperature": 0}) + "\n")
            args = [*launcher, INFERA, "--log-level", "warn", "generate", "--input", inp, "--output", out, *extra]
            if model:
                args += ["-m", model]
            r = run(args)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                return [json.loads(line)["choices"][0]["text"] for line in f]

    def check_model(self, model):
        one = self.generate(model, ["-t", "1"])
        self.assertEqual(len(one), 32)
        self.assertGreater(len(set(one)), 8, "prompts should give varied outputs")
        layouts = [["--tp", "2"], ["--pp", "2"], ["--tp", "2", "--pp", "2"]]
        for layout in layouts:
            with self.subTest(backend="threads", layout=layout):
                self.assertEqual(self.generate(model, [*layout, "--parallel-backend", "threads", "-t", "1"]), one)
            if HAVE_MPI:
                n = 1
                for i in range(1, len(layout), 2):
                    n *= int(layout[i])
                with self.subTest(backend="mpi", layout=layout):
                    self.assertEqual(self.generate(model, [*layout, "-t", "1"], launcher=mpirun(n)), one)

    def test_bundled_model(self):
        self.check_model(None)

    def test_tinystories(self):
        if not os.path.exists(TINY):
            self.skipTest("no ../shared")
        self.check_model(TINY)

    def test_tinystories_q8_0(self):
        if not os.path.exists(TINY_Q8):
            self.skipTest("no ../shared")
        self.check_model(TINY_Q8)


class ServeSplit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with Server("--max-num-seqs", "32", threads=1) as s:
            cls.expected = [cls.complete(s, p) for p in prompts()]

    @staticmethod
    def complete(server, prompt):
        status, body = server.json("POST", "/v1/completions",
                                   {"prompt": prompt, "max_tokens": 16, "temperature": 0})
        assert status == 200, body
        return body["choices"][0]["text"]

    def check(self, layout, n):
        if not HAVE_MPI:
            self.skipTest("no mpirun")
        server = Server("--max-num-seqs", "32", *layout, launcher=mpirun(n), threads=1)
        try:
            got = [None] * 32

            def one(i):
                got[i] = self.complete(server, prompts()[i])
            threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(got, self.expected)
            status, body = server.json("POST", "/v1/chat/completions",
                                       {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                        "stream": False})
            self.assertEqual(status, 200, body)
            status, _, data = server.request("POST", "/v1/completions",
                                             {"prompt": prompts()[3], "max_tokens": 16, "temperature": 0,
                                              "stream": True})
            self.assertEqual(status, 200)
            text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in data.decode().split("\n\n")
                           if e.startswith("data: {"))
            self.assertEqual(text, self.expected[3])
            status, _, _ = server.request("GET", "/health")
            self.assertEqual(status, 200)
            # Every rank's totals, labelled by rank, on rank 0's /metrics.
            status, _, data = server.request("GET", "/metrics")
            text = data.decode()
            for r in range(n):
                self.assertRegex(text, r'infera_parallel_steps_total\{rank="%d"\} [1-9]' % r)
                self.assertIn('infera_parallel_sent_bytes_total{rank="%d"}' % r, text)
        finally:
            # mpirun forwards SIGUSR1 to every rank as is (a SIGTERM it turns
            # into killing the job a few seconds later): rank 0 drains, stops
            # the workers, and the job ends cleanly.
            server.proc.send_signal(signal.SIGUSR1)
            try:
                server.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
            code = server.stop()
        self.assertEqual(code, 0, "".join(server.log))
        self.assertIn("SIGUSR1: draining", "".join(server.log))
        self.assertIn("stopped", "".join(server.log))

    def test_tp2(self):
        self.check(["--tp", "2"], 2)

    def test_pp2(self):
        self.check(["--pp", "2"], 2)

    def test_tp2_pp2(self):
        self.check(["--tp", "2", "--pp", "2"], 4)


def worker_pid(mpirun_pid, rank=1):
    """The pid of MPI rank `rank` under an mpirun process (from its environment)."""
    for child in subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split():
        try:
            with open(f"/proc/{child}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(child)
    return None


class Faults(unittest.TestCase):
    """A worker rank that dies or hangs mid-request: the request ends with 503
    within seconds (never waits forever), /health fails, the job exits
    non-zero for its supervisor, and a restarted group serves again."""

    def check(self, sig, expect_log):
        if not HAVE_MPI:
            self.skipTest("no mpirun")
        server = Server("--tp", "2", "--step-timeout", "3", launcher=mpirun(2), threads=1)
        try:
            pid = worker_pid(server.proc.pid)
            self.assertIsNotNone(pid)
            result = {}

            def long_request():
                result["status"], result["body"] = server.json(
                    "POST", "/v1/completions", {"prompt": "In the", "max_tokens": 900, "ignore_eos": True},
                    timeout=60)
            t = threading.Thread(target=long_request)
            t.start()
            time.sleep(0.3)
            os.kill(pid, sig)
            t0 = time.time()
            t.join(60)
            self.assertFalse(t.is_alive(), "the request waited forever")
            self.assertLess(time.time() - t0, 20)
            self.assertEqual(result["status"], 503, result)
            self.assertEqual(result["body"]["error"]["type"], "service_unavailable")
            server.proc.wait(30)
            self.assertNotEqual(server.proc.returncode, 0)
            self.assertIn(expect_log, "".join(server.log))
        finally:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            server.stop()
        # A restarted group serves again.
        with Server("--tp", "2", launcher=mpirun(2), threads=1) as again:
            status, body = again.json("POST", "/v1/completions", {"prompt": "In the", "max_tokens": 4})
            self.assertEqual(status, 200, body)
            again.proc.send_signal(signal.SIGUSR1)
            again.proc.wait(60)

    def test_killed_rank(self):
        # mpirun sees the death and tears the job down; rank 0 ends what is in
        # flight with 503 before it goes.
        self.check(signal.SIGKILL, "parallel group failed")

    def test_hung_rank(self):
        # A stopped process is alive to mpirun: the step deadline catches it.
        self.check(signal.SIGSTOP, "past --step-timeout")


CLUSTER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts",
                       "netns_cluster.sh")


class MultiHost(unittest.TestCase):
    """Ranks on different "hosts": network namespaces joined by veth pairs and
    a bridge (scripts/netns_cluster.sh), mpirun over TCP with a hostfile of
    their addresses. Needs root (as CI runs)."""

    @classmethod
    def setUpClass(cls):
        if not HAVE_MPI or os.geteuid() != 0 or shutil.which("ip") is None:
            raise unittest.SkipTest("needs mpirun, root and iproute2")
        cls.dir = tempfile.mkdtemp()
        subprocess.run(["bash", CLUSTER, "down", "3"], capture_output=True)
        r = subprocess.run(["bash", CLUSTER, "up", "3", cls.dir], capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["bash", CLUSTER, "down", "3"], capture_output=True)
            raise unittest.SkipTest("cannot create network namespaces here: " + r.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["bash", CLUSTER, "down", "3"], capture_output=True)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def launcher(self, n):
        # rtc_hwloc_vmhole none: the daemons do not share their hwloc topology
        # through a shared-memory segment mapped into a "hole" of the address
        # space; with several daemons on one machine that mapping raced and
        # an orted crashed in hwloc_shmem_topology_write (1 run in 4).
        return ["ip", "netns", "exec", "infera_h0", "mpirun", "--hostfile", os.path.join(self.dir, "hostfile"),
                "-np", str(n), "--mca", "plm_rsh_agent", os.path.join(self.dir, "rsh"), "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", "10.77.0.0/24", "--mca", "oob_tcp_if_include", "10.77.0.0/24",
                "--mca", "rtc_hwloc_vmhole", "none"]

    def test_generate_across_hosts(self):
        g = GenerateSplit()
        one = g.generate(None, ["-t", "1"])
        self.assertEqual(g.generate(None, ["--tp", "2", "-t", "1"], launcher=self.launcher(2)), one)
        self.assertEqual(g.generate(None, ["--pp", "3", "-t", "1"], launcher=self.launcher(3)), one)

    def test_ranks_run_on_their_hosts(self):
        r = run([*self.launcher(3), "sh", "-c", "ip -4 -o addr show | grep -o '10\\.77\\.0\\.[0-9]*'"],
                timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.split()), ["10.77.0.1", "10.77.0.2", "10.77.0.3"])


class Refusals(unittest.TestCase):
    def test_heads_do_not_divide(self):
        r = run([INFERA, "generate", "--input", "-", "--output", "/dev/null", "--tp", "3",
                 "--parallel-backend", "threads"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()[-1:]), 1)
        self.assertIn("KV heads", r.stderr)

    def test_world_size_mismatch(self):
        if not HAVE_MPI:
            self.skipTest("no mpirun")
        r = run([*mpirun(2), INFERA, "run", "-p", "x", "-n", "2", "--tp", "2", "--pp", "2"], timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs 4", r.stderr)

    def test_bad_pp_layers(self):
        r = run([INFERA, "run", "-p", "x", "-n", "2", "--pp", "2", "--pp-layers", "5,5", "--parallel-backend",
                 "threads"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--pp-layers", r.stderr)


if __name__ == "__main__":
    unittest.main()
