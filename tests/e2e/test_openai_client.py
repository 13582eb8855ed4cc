"""The official OpenAI JavaScript client (npm package `openai`, installed by
scripts/test.sh with `npm ci` in tests/e2e/js) against `infera serve`: runs
tests/e2e/js/openai_client.test.mjs with Node's test runner, then checks the
server let go of every KV block (the last test aborts a stream)."""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server  # noqa: E402

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")


class OpenAIClientTest(unittest.TestCase):
    def test_openai_js_client(self):
        node = shutil.which("node")
        self.assertIsNotNone(node, "Node.js is required (scripts/install-deps.sh installs it)")
        self.assertTrue(os.path.isdir(os.path.join(JS, "node_modules", "openai")),
                        "run `npm ci --prefix tests/e2e/js` first (scripts/test.sh does)")
        key = "sk-infera-e2e"
        with Server("--api-key", key, "--served-model-name", "infera-demo") as srv:
            env = dict(os.environ, INFERA_URL=srv.url, INFERA_KEY=key, INFERA_MODEL="infera-demo")
            r = subprocess.run([node, "--test", "--test-reporter=spec", "openai_client.test.mjs"], cwd=JS, env=env,
                               capture_output=True, text=True, timeout=600)
            sys.stderr.write(r.stdout[-6000:] + r.stderr[-3000:])
            self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-2000:])
            import time
            deadline = time.time() + 10
            while srv.metric("infera_kv_blocks_used") != 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(srv.metric("infera_kv_blocks_used"), 0)
            self.assertEqual(srv.metric("infera_num_requests_running"), 0)


if __name__ == "__main__":
    unittest.main()
