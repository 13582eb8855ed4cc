// OpenAI tool calling on top of the model's own tool-call format.
//
// The tools go to the chat template (which tells the model how to call them);
// what the model writes is parsed back into OpenAI `tool_calls` in the
// family's format, recognized from the template:
//   hermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>  (Qwen 2.5/3, Hermes)
//   llama3   {"name": ..., "parameters": {...}} as the whole reply        (Llama 3.1+)
//   mistral  [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]          (Mistral)
//   json     vLLM's format-free fallback: a JSON list [{"name", "parameters"}]
// tool_choice "required" or a named function is enforced by a grammar that
// only admits calls in that format whose arguments validate against the
// tool's parameter schema (the JSON-schema converter of output_constraints).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infera/status.h"

namespace infera::server {

enum class ToolCallFormat { kJson, kHermes, kLlama3, kMistral };

const char* ToolCallFormatName(ToolCallFormat f);
bool ParseToolCallFormat(const std::string& name, ToolCallFormat* out);
// The format a chat template teaches its model (kJson if none is recognized).
ToolCallFormat DetectToolCallFormat(const std::string& template_source);

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // JSON schema of the arguments ({"type": "object"} if none given)
};

// A request's tools and tool_choice.
struct ToolRequest {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  std::vector<ToolSpec> tools;
  nlohmann::ordered_json tools_json;  // as sent (key order kept), for the template; null if none
  Choice choice = Choice::kAuto;
  std::string named;      // kNamed: the function
  bool parallel = true;   // parallel_tool_calls
  bool any() const { return !tools.empty(); }
};

// Reads tools / tool_choice / parallel_tool_calls of `ordered_body` (the
// request as sent). On bad input returns InvalidArgument whose message starts
// with the field name and ": ".
Status ParseToolRequest(const nlohmann::ordered_json& ordered_body, ToolRequest* out);

// GBNF admitting only tool calls (required: any tool, named: that one) in
// `format`, one or (parallel) several; arguments follow each tool's schema.
StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const ToolRequest& req);

struct ToolCall {
  std::string id;         // call_... (mistral: 9 alphanumerics, as its template requires)
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedReply {
  std::string content;  // text outside the calls
  std::vector<ToolCall> calls;
};

// Splits a finished reply into content and tool calls. Text that looks like a
// call but does not parse stays content. `seed` makes the call ids.
ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text, uint64_t seed);

// Streaming: passes content through as it comes, holding back text from the
// point where a tool call may start, and parses the held text at the end.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, uint64_t seed) : format_(format), seed_(seed) {}
  // New text of the reply -> content that can be sent now.
  std::string Feed(const std::string& text);
  // The reply ended: the content still held back, and the calls.
  ParsedReply Finish();

 private:
  ToolCallFormat format_;
  uint64_t seed_;
  std::string held_;      // text not yet released
  bool holding_ = false;  // a call (may have) started: hold everything after
  bool started_ = false;  // any non-space text seen (llama3 / json calls start the reply)
};

// The id of call `index` of a reply: call_ + 24 alphanumerics (mistral: 9
// alphanumerics, as its template requires), from `seed`.
std::string ToolCallId(ToolCallFormat format, uint64_t seed, size_t index);

// The OpenAI JSON of a call: {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json ToolCallJson(const ToolCall& c);

}  // namespace infera::server
