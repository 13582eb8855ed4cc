"""/metrics of `infera serve`: passes `promtool check metrics` with no
warnings, values move as known traffic says, OpenMetrics on request; a real
Prometheus server scrapes it under load and answers a PromQL quantile; the
alert rules pass `promtool check rules` and their unit tests."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, Server, free_port  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
DEPLOY = os.path.join(REPO, "deploy", "prometheus")


def samples(text):
    """{series (name + labels): value} of an exposition."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # With a disk KV tier, so its series (and the dashboard's offload row) have data.
        cls.kv_dir = tempfile.mkdtemp(prefix="infera-metrics-kv-")
        cls.srv = Server("--kv-offload-dir", cls.kv_dir)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.kv_dir, ignore_errors=True)

    def scrape(self, accept=None):
        headers = {"Accept": accept} if accept else {}
        st, hdrs, body = self.srv.request("GET", "/metrics", headers=headers)
        self.assertEqual(st, 200)
        return hdrs, body.decode()

    def test_promtool_accepts_metrics(self):
        self.srv.json("POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 4})
        self.srv.json("GET", "/nope")
        hdrs, text = self.scrape()
        self.assertTrue(hdrs["content-type"].startswith("text/plain; version=0.0.4"))
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual((r.stdout + r.stderr).strip(), "")  # no warnings either
        for name in ["infera_request_success_total", "infera_prompt_tokens_total", "infera_generation_tokens_total",
                     "infera_time_to_first_token_seconds_bucket", "infera_inter_token_latency_seconds_bucket",
                     "infera_e2e_request_latency_seconds_bucket", "infera_request_queue_time_seconds_bucket",
                     "infera_num_requests_running", "infera_num_requests_waiting", "infera_kv_cache_usage_ratio",
                     "infera_prefix_cache_queries_total", "infera_prefix_cache_hits_total",
                     "infera_num_preemptions_total", "infera_build_info", "process_resident_memory_bytes",
                     "infera_iteration_tokens_bucket", "infera_http_requests_total"]:
            self.assertIn("\n" + name, text, name)
        hdrs, om = self.scrape("application/openmetrics-text; version=1.0.0")
        self.assertTrue(hdrs["content-type"].startswith("application/openmetrics-text"))
        self.assertTrue(om.endswith("# EOF\n"))

    def test_values_follow_traffic(self):
        before = samples(self.scrape()[1])
        for i in range(10):
            st, b = self.srv.json("POST", "/v1/completions",
                                  {"prompt": [300 + i, 301, 302, 303, 304], "max_tokens": 3, "ignore_eos": True})
            self.assertEqual(st, 200)
        st, _ = self.srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": -1})
        self.assertEqual(st, 400)
        after = samples(self.scrape()[1])

        def delta(series):
            return after.get(series, 0) - before.get(series, 0)

        self.assertEqual(delta("infera_prompt_tokens_total"), 50)
        self.assertEqual(delta("infera_generation_tokens_total"), 30)
        self.assertEqual(delta('infera_request_success_total{finished_reason="length"}'), 10)
        self.assertEqual(delta('infera_http_requests_total{endpoint="/v1/completions",status="200"}'), 10)
        self.assertEqual(delta('infera_http_requests_total{endpoint="/v1/completions",status="400"}'), 1)
        self.assertEqual(delta("infera_time_to_first_token_seconds_count"), 10)
        self.assertEqual(delta("infera_e2e_request_latency_seconds_count"), 10)
        self.assertEqual(delta("infera_inter_token_latency_seconds_count"), 20)
        self.assertEqual(delta("infera_request_prompt_tokens_sum"), 50)
        self.assertEqual(delta('infera_request_prompt_tokens_bucket{le="4"}'), 0)
        self.assertEqual(delta('infera_request_prompt_tokens_bucket{le="8"}'), 10)
        self.assertGreaterEqual(delta("infera_prefix_cache_queries_total"), 50)
        self.assertEqual(after["infera_num_requests_running"], 0)
        self.assertEqual(after["infera_kv_cache_usage_ratio"], 0)

    def test_real_prometheus_scrapes_and_answers_promql(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        f"rule_files:\n  - {os.path.join(DEPLOY, 'alerts.yml')}\n"
                        "scrape_configs:\n  - job_name: infera\n    static_configs:\n"
                        f"      - targets: ['127.0.0.1:{self.srv.port}']\n")
            port = free_port()
            prom = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={d}/data",
                                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            stop = threading.Event()

            def load():
                i = 0
                while not stop.is_set():
                    self.srv.json("POST", "/v1/completions", {"prompt": f"In the beginning {i}", "max_tokens": 4})
                    i += 1

            loader = threading.Thread(target=load)
            loader.start()
            try:
                q = "histogram_quantile(0.95, rate(infera_time_to_first_token_seconds_bucket[1m]))"
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
                value = None
                deadline = time.time() + 90
                while time.time() < deadline and value is None:
                    time.sleep(1)
                    try:
                        with urllib.request.urlopen(url, timeout=5) as r:
                            res = json.loads(r.read())
                    except OSError:
                        continue
                    if res.get("status") == "success" and res["data"]["result"]:
                        v = float(res["data"]["result"][0]["value"][1])
                        if v == v:  # not NaN
                            value = v
                self.assertIsNotNone(value, "no quantile from Prometheus")
                self.assertGreater(value, 0)
                self.assertLess(value, 60)
                # The scrape target is healthy and the rules loaded.
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
                    targets = json.loads(r.read())["data"]["activeTargets"]
                self.assertEqual([t["health"] for t in targets], ["up"])
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
                    groups = json.loads(r.read())["data"]["groups"]
                self.assertEqual(len(groups[0]["rules"]), 5)
                self.assertTrue(all(rule["health"] == "ok" for rule in groups[0]["rules"]))
                # Every query of the Grafana dashboard is valid PromQL here, and the
                # request panels have data.
                with open(os.path.join(REPO, "deploy", "grafana", "infera.json")) as f:
                    dash = json.load(f)
                exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
                self.assertGreaterEqual(len(exprs), 15)
                with_data = 0
                for e in exprs:
                    e = e.replace("$instance", ".*").replace("$__rate_interval", "1m")
                    u = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": e})
                    with urllib.request.urlopen(u, timeout=5) as r:
                        res = json.loads(r.read())
                    self.assertEqual(res["status"], "success", e)
                    with_data += 1 if res["data"]["result"] else 0
                self.assertGreaterEqual(with_data, len(exprs) - 4)
            finally:
                stop.set()
                loader.join()
                prom.terminate()
                prom.wait(30)


    def test_infera_top(self):
        from common import infera
        for _ in range(3):  # traffic before top starts: its first screen shows it at once
            self.srv.json("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 8})
        threading.Thread(target=lambda: [self.srv.json("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 8})
                                          for _ in range(5)]).start()
        r = infera("top", "--url", self.srv.url, "--interval", "0.3", "--iterations", "3", timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.decode().splitlines()
        self.assertEqual(len(lines), 5)  # header, "since start", 3 refreshes
        self.assertIn("gen tok/s", lines[0])
        self.assertIn("(since start)", lines[1])
        first = lines[1].split()
        self.assertGreater(float(first[0]), 0)  # req/s since start
        self.assertGreater(float(first[1]), 0)  # generated tok/s
        self.assertNotEqual(first[2], "-ms")    # a TTFT p50
        self.assertIn("%", lines[2])
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
        s.close()
        r = infera("top", "--url", f"http://127.0.0.1:{dead}", "--iterations", "1", timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1)


class AlertRulesTest(unittest.TestCase):
    def test_promtool_check_and_test_rules(self):
        r = subprocess.run([PROMTOOL, "check", "rules", os.path.join(DEPLOY, "alerts.yml")], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=DEPLOY, capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
