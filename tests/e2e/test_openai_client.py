"""The official OpenAI JavaScript client (npm package `openai`, installed by
scripts/test.sh with `npm ci` in tests/e2e/js) against `infera serve`: runs
tests/e2e/js/openai_client.test.mjs with Node's test runner, then checks the
server let go of every KV block (the last test aborts a stream)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_node_test  # noqa: E402

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")


class OpenAIClientTest(unittest.TestCase):
    def test_openai_js_client(self):
        self.assertTrue(os.path.isdir(os.path.join(JS, "node_modules", "openai")),
                        "run `npm ci --prefix tests/e2e/js` first (scripts/test.sh does)")
        key = "sk-infera-e2e"
        with Server("--api-key", key, "--served-model-name", "infera-demo") as srv:
            run_node_test(self, srv, "openai_client.test.mjs", INFERA_KEY=key, INFERA_MODEL="infera-demo")


if __name__ == "__main__":
    unittest.main()
