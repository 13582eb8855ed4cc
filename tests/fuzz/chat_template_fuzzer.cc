// libFuzzer target: Jinja chat templates. A template comes from the model
// file or, with --trust-request-chat-template, from any API client: untrusted
// input. Every source is parsed and, if it parses, rendered with a
// conversation that has tools, tool calls and unicode. Must never crash,
// hang or exhaust memory, whatever the text (the render is bounded).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/json.h"
#include "jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  static const nlohmann::ordered_json kContext = ParseOrderedJson(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "héllo 🙂"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
                   "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
                 {"role": "tool", "tool_call_id": "call12345", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  auto t = jinja::Template::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  jinja::RenderLimits limits;
  limits.max_steps = 100'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_sequence = 100'000;
  (void)t->Render(kContext, limits);
  return 0;
}
