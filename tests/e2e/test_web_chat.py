"""The web chat page at / (src/server/web/chat.html): its HTTP contract here,
then tests/e2e/js/web_chat.test.mjs drives it in Debian's headless Chromium
with playwright-core (installed by scripts/test.sh with `npm ci` in
tests/e2e/js): type a prompt, watch tokens stream, stop, reload. The
screenshot is kept as a test artifact in <build>/test-artifacts/web_chat.png.
Afterwards the server must hold no KV blocks (the stopped stream freed its)."""
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import INFERA, Server  # noqa: E402

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
ARTIFACTS = os.environ.get("INFERA_ARTIFACTS",
                           os.path.join(os.path.dirname(os.path.dirname(INFERA)), "test-artifacts"))


class WebChatTest(unittest.TestCase):
    def test_page_contract(self):
        with Server("--api-key", "k") as srv:
            st, headers, body = srv.request("GET", "/")
            self.assertEqual(st, 200)
            h = headers
            self.assertEqual(h["content-type"], "text/html; charset=utf-8")
            self.assertIn("connect-src 'self'", h["content-security-policy"])
            self.assertIn("frame-ancestors 'none'", h["content-security-policy"])
            page = body.decode()
            self.assertIn("<title>infera chat</title>", page)
            # Self-contained: nothing loaded from anywhere else.
            for needle in ("http://", "https://", "src=\"", "@import", "url("):
                self.assertNotIn(needle, page)
            st, headers, body = srv.request("HEAD", "/")
            self.assertEqual((st, body), (200, b""))
            # The page is open; the API behind it still needs the key.
            self.assertEqual(srv.request("POST", "/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "x"}]})[0], 401)
        with Server("--no-web-ui") as srv:
            st, _, _ = srv.request("GET", "/")
            self.assertEqual(st, 404)
            self.assertEqual(srv.request("GET", "/health")[0], 200)

    def test_in_headless_chromium(self):
        node = shutil.which("node")
        self.assertIsNotNone(node, "Node.js is required (scripts/install-deps.sh installs it)")
        self.assertTrue(os.path.exists("/usr/bin/chromium"), "scripts/install-deps.sh installs Debian's chromium")
        self.assertTrue(os.path.isdir(os.path.join(JS, "node_modules", "playwright-core")),
                        "run `npm ci --prefix tests/e2e/js` first (scripts/test.sh does)")
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "web_chat.png")
        if os.path.exists(shot):
            os.remove(shot)
        key = "sk-web-chat"
        # --context-shift: turn 1 asks for 20000 tokens, many seconds of
        # streaming for the test to stop by hand whatever the machine's speed.
        # One compute thread: the browser needs a core of its own to render.
        with Server("--api-key", key, "--served-model-name", "kjv-demo", "--context-shift", threads=1) as srv:
            env = dict(os.environ, INFERA_URL=srv.url, INFERA_KEY=key, INFERA_MODEL="kjv-demo",
                       INFERA_ARTIFACTS=ARTIFACTS)
            r = subprocess.run([node, "--test", "--test-reporter=spec", "web_chat.test.mjs"], cwd=JS, env=env,
                               capture_output=True, text=True, timeout=600)
            sys.stderr.write(r.stdout[-6000:] + r.stderr[-3000:])
            self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-2000:])
            deadline = time.time() + 10
            while srv.metric("infera_kv_blocks_used") != 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(srv.metric("infera_kv_blocks_used"), 0)
            self.assertEqual(srv.metric("infera_num_requests_running"), 0)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        sys.stderr.write(f"screenshot: {shot}\n")


if __name__ == "__main__":
    unittest.main()
