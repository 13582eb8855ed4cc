"""Structured logs and traces of `infera serve`: JSON log lines parse and
carry request_id and trace_id (the caller's, from `traceparent`); sampling
drops successful requests' lines but keeps failures; prompts stay out of logs
unless asked; the log level changes at run time behind the API key; spans
(server, queue, prefill, decode) reach a local OTLP/HTTP receiver with the
caller's trace id, and a dead collector never fails a request."""
import http.server
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, wait_for  # noqa: E402

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


def json_lines(srv):
    out = []
    for line in srv.log:
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))  # every JSON-looking line must parse
    return out


class OtlpReceiver:
    """A minimal OTLP/HTTP JSON trace receiver on loopback."""

    def __init__(self):
        self.spans = []
        spans = self.spans

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                for rs in body["resourceSpans"]:
                    service = [a["value"]["stringValue"] for a in rs["resource"]["attributes"]
                               if a["key"] == "service.name"]
                    for ss in rs["scopeSpans"]:
                        for s in ss["spans"]:
                            s["service"] = service[0] if service else None
                            spans.append(s)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class LogsTest(unittest.TestCase):
    def test_json_lines_with_ids_and_no_prompts(self):
        with Server("--log-format", "json") as srv:
            st, hdrs, body = srv.request("POST", "/v1/completions",
                                         {"prompt": "In the beginning SECRET", "max_tokens": 4},
                                         headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
            self.assertEqual(st, 200)
            rid = json.loads(body)["id"]
            self.assertEqual(hdrs["x-request-id"], rid)
            self.assertTrue(hdrs["traceparent"].startswith(f"00-{TRACE}-"))
            self.assertNotIn(PARENT, hdrs["traceparent"])  # our own span id
            st, _, _ = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": -1})
            self.assertEqual(st, 400)
            self.assertTrue(wait_for(lambda: any(l.get("message") == "request failed" for l in json_lines(srv))))
            lines = json_lines(srv)
            for line in lines:
                for k in ("time", "level", "message"):
                    self.assertIn(k, line)
            done = [l for l in lines if l["message"] == "request finished"]
            self.assertEqual(len(done), 1)
            d = done[0]
            self.assertEqual((d["request_id"], d["trace_id"], d["status"]), (rid, TRACE, 200))
            for k in ("prompt_tokens", "completion_tokens", "cached_tokens", "queue_ms", "ttft_ms", "e2e_ms",
                      "finish_reason"):
                self.assertIn(k, d)
            self.assertEqual(d["completion_tokens"], 4)
            failed = [l for l in lines if l["message"] == "request failed"][0]
            self.assertEqual((failed["level"], failed["status"]), ("warn", 400))
            self.assertEqual(len(failed["trace_id"]), 32)
            self.assertNotIn("SECRET", "".join(srv.log))  # prompts are not logged by default

    def test_sampling_keeps_failures_and_log_prompts(self):
        with Server("--log-format", "json", "--log-sample", "0", "--log-prompts") as srv:
            for _ in range(3):
                self.assertEqual(srv.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2})[0], 200)
            self.assertEqual(srv.request("POST", "/v1/completions", {"prompt": 5})[0], 400)
            self.assertTrue(wait_for(lambda: any(l.get("message") == "request failed" for l in json_lines(srv))))
            lines = json_lines(srv)
            self.assertEqual([l for l in lines if l["message"] == "request finished"], [])
        with Server("--log-format", "json", "--log-prompts") as srv:
            srv.request("POST", "/v1/completions", {"prompt": "In the beginning SECRET", "max_tokens": 2})
            self.assertTrue(wait_for(lambda: any(l.get("message") == "request finished" for l in json_lines(srv))))
            d = [l for l in json_lines(srv) if l["message"] == "request finished"][0]
            self.assertEqual(d["prompt"], "In the beginning SECRET")
            self.assertIn("output", d)

    def test_log_level_at_run_time_behind_the_key(self):
        with Server("--log-format", "json", "--api-key", "k1") as srv:
            st, b = srv.json("POST", "/admin/log-level", {"level": "debug"})
            self.assertEqual(st, 401)
            auth = {"Authorization": "Bearer k1"}
            st, b = srv.json("POST", "/admin/log-level", {"level": "loud"}, headers=auth)
            self.assertEqual((st, b["error"]["param"]), (400, "level"))
            st, b = srv.json("GET", "/admin/log-level", headers=auth)
            self.assertEqual((st, b["level"]), (200, "info"))
            st, b = srv.json("POST", "/admin/log-level", {"level": "debug"}, headers=auth)
            self.assertEqual((st, b["level"]), (200, "debug"))
            srv.request("GET", "/health")
            self.assertTrue(wait_for(lambda: any(l["level"] == "debug" and l.get("endpoint") == "/health"
                                                 for l in json_lines(srv))))
            srv.json("POST", "/admin/log-level", {"level": "error"}, headers=auth)
            n = len(json_lines(srv))
            srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=auth)
            srv.request("POST", "/v1/completions", {"prompt": 5}, headers=auth)  # a 400: warn, now filtered
            time.sleep(0.3)
            self.assertEqual(len(json_lines(srv)), n)


class TracingTest(unittest.TestCase):
    def test_spans_reach_the_collector(self):
        recv = OtlpReceiver()
        try:
            with Server("--otlp-endpoint", f"http://127.0.0.1:{recv.port}/v1/traces",
                        "--otlp-service-name", "infera-test") as srv:
                st, hdrs, body = srv.request("POST", "/v1/chat/completions",
                                             {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                                              "n": 2},
                                             headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
                self.assertEqual(st, 200)
                server_span = hdrs["traceparent"].split("-")[2]
                st, hdrs2, _ = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
                other_trace = hdrs2["traceparent"].split("-")[1]
                self.assertNotEqual(other_trace, TRACE)
                self.assertTrue(wait_for(lambda: len(recv.spans) >= 2 + 3 * 2 + 3, timeout=15), recv.spans)
            mine = [s for s in recv.spans if s["traceId"] == TRACE]
            names = sorted(s["name"] for s in mine)
            self.assertEqual(names, sorted(["POST /v1/chat/completions"] + ["queue", "prefill", "decode"] * 2))
            root = [s for s in mine if s["name"].startswith("POST")][0]
            self.assertEqual((root["spanId"], root["parentSpanId"], root["kind"]), (server_span, PARENT, 2))
            self.assertEqual(root["service"], "infera-test")
            for s in mine:
                self.assertLessEqual(int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]))
                if s is not root:
                    self.assertEqual(s["parentSpanId"], server_span)
                    self.assertGreaterEqual(int(s["startTimeUnixNano"]), int(root["startTimeUnixNano"]))
                    self.assertLessEqual(int(s["endTimeUnixNano"]), int(root["endTimeUnixNano"]))
            self.assertTrue(any(s["traceId"] == other_trace for s in recv.spans))
        finally:
            recv.close()

    def test_dead_collector_never_fails_requests(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
        s.close()
        with Server("--otlp-endpoint", f"http://127.0.0.1:{dead}/v1/traces") as srv:
            t0 = time.time()
            for _ in range(5):
                self.assertEqual(srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})[0], 200)
            self.assertLess(time.time() - t0, 20)
            time.sleep(1.5)  # an export attempt fails meanwhile
            self.assertEqual(srv.request("POST", "/v1/completions", {"prompt": "y", "max_tokens": 2})[0], 200)
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    unittest.main()
