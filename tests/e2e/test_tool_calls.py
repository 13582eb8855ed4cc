"""Tool calls through the server with the official OpenAI JavaScript client
(tests/e2e/js/tool_calls.test.mjs), OpenAI's Responses API with the same
client (responses_client.test.mjs) and Anthropic's Messages API with its
official SDK (anthropic_client.test.mjs), the server running Qwen 2.5's real chat
template (hermes format) over the bundled model; plus the same flow checked
from Python for Llama 3.1's and Mistral's formats, whose calls must parse
back and whose prompts carry the tools the way the templates write them."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_node_test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "data", "chat_templates")
CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                   "required": ["city"], "additionalProperties": False}}}]


class ToolCallsHermesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--chat-template-file", os.path.join(TEMPLATES, "qwen2.5-instruct.jinja"),
                         "--max-num-seqs", "8")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_official_client_tool_flow(self):
        run_node_test(self, self.srv, "tool_calls.test.mjs")

    def test_official_anthropic_client(self):
        # Anthropic's Messages API (/v1/messages) with its official SDK.
        run_node_test(self, self.srv, "anthropic_client.test.mjs")

    def test_official_client_responses_api(self):
        # OpenAI's Responses API (/v1/responses), the client's responses.* calls.
        run_node_test(self, self.srv, "responses_client.test.mjs")

    def test_format_detected_from_template(self):
        self.assertTrue(any("tool calls as hermes" in line for line in self.srv.log), "".join(self.srv.log[-20:]))


class ToolCallsOtherFormatsTest(unittest.TestCase):
    """Llama 3.1 (JSON with "parameters") and Mistral ([TOOL_CALLS]): the
    constrained call parses back; tool results render through the template."""

    def run_format(self, template, expect_format, parser_flag=()):
        srv = Server("--chat-template-file", os.path.join(TEMPLATES, template), *parser_flag)
        try:
            self.assertTrue(any(f"tool calls as {expect_format}" in line for line in srv.log))
            msgs = [{"role": "user", "content": "Weather in Paris?"}]
            st, b = srv.json("POST", CHAT, {"messages": msgs, "tools": TOOLS, "tool_choice": "required",
                                            "parallel_tool_calls": False, "max_tokens": 120, "seed": 2})
            self.assertEqual(st, 200, b)
            c = b["choices"][0]
            self.assertEqual(c["finish_reason"], "tool_calls", c)
            call = c["message"]["tool_calls"][0]
            self.assertEqual(call["function"]["name"], "get_weather")
            self.assertIsInstance(json.loads(call["function"]["arguments"])["city"], str)
            # Round trip: the assistant's call and the tool's result go back in.
            follow = msgs + [c["message"], {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
            st, b = srv.json("POST", CHAT, {"messages": follow, "tools": TOOLS, "max_tokens": 4, "seed": 1})
            self.assertEqual(st, 200, b)
            return call
        finally:
            srv.stop()

    def test_llama31(self):
        self.run_format("llama-3.1-instruct.jinja", "llama3_json")

    def test_mistral(self):
        call = self.run_format("mistral-large-2407.jinja", "mistral")
        self.assertRegex(call["id"], r"^[A-Za-z0-9]{9}$")  # as Mistral's template requires

    def test_json_fallback_named_and_required(self):
        # The bundled model's ChatML template teaches no tool format: vLLM's
        # format-free JSON. Named: the reply is the arguments object itself.
        srv = Server()
        try:
            self.assertTrue(any("tool calls as json" in line for line in srv.log))
            msgs = [{"role": "user", "content": "Weather in Paris?"}]
            st, b = srv.json("POST", CHAT, {"messages": msgs, "tools": TOOLS, "max_tokens": 60, "seed": 3,
                                            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
            self.assertEqual(st, 200, b)
            c = b["choices"][0]
            self.assertEqual(c["finish_reason"], "tool_calls", c)
            call = c["message"]["tool_calls"][0]
            self.assertRegex(call["id"], r"^call_[A-Za-z0-9]{24}$")
            self.assertEqual(call["function"]["name"], "get_weather")
            self.assertIsInstance(json.loads(call["function"]["arguments"])["city"], str)
            st, b = srv.json("POST", CHAT, {"messages": msgs, "tools": TOOLS, "tool_choice": "required",
                                            "parallel_tool_calls": False, "max_tokens": 80, "seed": 3})
            self.assertEqual(st, 200, b)
            self.assertEqual(b["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather")
        finally:
            srv.stop()

    def test_builtin_format_refuses_tools(self):
        srv = Server("--chat-template", "chatml")
        try:
            st, b = srv.json("POST", CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS,
                                            "max_tokens": 2})
            self.assertEqual(st, 400, b)
            self.assertEqual(b["error"]["param"], "tools")
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
