"""The web chat page at / (src/server/web/chat.html): its HTTP contract here,
then tests/e2e/js/web_chat.test.mjs drives it in Debian's headless Chromium
with playwright-core (installed by scripts/test.sh with `npm ci` in
tests/e2e/js): type a prompt, watch tokens stream, stop, reload. The
screenshot is kept as a test artifact in <build>/test-artifacts/web_chat.png.
Afterwards the server must hold no KV blocks (the stopped stream freed its)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import INFERA, Server, run_node_test  # noqa: E402

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
            run_node_test(self, srv, "web_chat.test.mjs", INFERA_KEY=key, INFERA_MODEL="kjv-demo",
                          INFERA_ARTIFACTS=ARTIFACTS)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        sys.stderr.write(f"screenshot: {shot}\n")


if __name__ == "__main__":
    unittest.main()
