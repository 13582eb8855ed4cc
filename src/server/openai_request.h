// Parsing and validation of OpenAI request bodies (/v1/completions,
// /v1/chat/completions): JSON in, token ids and engine parameters out, or an
// OpenAI-style error. No I/O, no engine: unit-testable on its own.
//
// Every field of the OpenAI, vLLM and llama.cpp APIs is parsed, accepted as
// having no effect on the output, or refused with 400 (request_fields.h);
// fields none of them defines are refused too. None is silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infera/engine.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infera::server {

// A session id a request may carry (empty: none): 1-128 characters of
// letters, digits and - _ . : @.
bool ValidSessionId(const std::string& id);

// An OpenAI error object: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
  std::string ToJson() const;
};

// A 400 invalid_value error naming field `param`.
ApiError BadValue(std::string param, std::string message);
// *err = BadValue(param, message); returns false (a parser's early return).
bool SetBadValue(ApiError* err, std::string param, std::string message);

struct ParseLimits {
  int32_t max_model_len = 2048;
  int32_t n_vocab = 0;
  int32_t max_n = 16;
  bool context_shift = false;  // prompt + max_tokens may exceed the context
  int32_t n_lora = 0;          // LoRA adapters loaded (ids of a request's 'lora' entries)
};

// What a completion request asks for, ready for the engine.
struct CompletionSpec {
  bool chat = false;
  std::string model;                        // as sent ("" if omitted)
  std::string user;                         // user or safety_identifier, for the request log
  std::vector<std::vector<int32_t>> prompts;  // completions may carry several
  std::vector<std::string> prompt_texts;    // the prompts as text (for echo)
  std::string chat_text;                    // with ParseContext::render_chat_text: the rendered chat
  RequestParams params;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  bool logprobs = false;      // return log-probabilities (params.logprobs = top count)
  // vLLM's prompt_logprobs (-1: none): per prompt token after the first
  // {id: {logprob, rank, decoded_token}} of it and the k most likely, in the
  // answer's prompt_logprobs (completions: each choice's; chat: the response's).
  int32_t prompt_logprobs = -1;
  // llama-server's /completion: the answer in its shape ({content, stop,
  // stop_type, timings, ...}; streamed as such chunks, no [DONE]; several
  // prompts: an array of such answers, chunks told apart by "index"); n = 1.
  // Its n_probs sets logprobs (completion_probabilities in the answer) and
  // params.logprobs; return_tokens lists the token ids.
  bool native = false;
  bool return_tokens = false;
  // Anthropic's /v1/messages (a chat request): the answer in its shape
  // ({"type": "message", "content": [text / tool_use blocks], "stop_reason",
  // "usage"}; streamed as its named events).
  bool anthropic = false;
  // Chat with tools (tool_choice not "none"): the reply is parsed for calls
  // in this format. tool_named: a named tool_choice (kJson replies are then
  // that function's arguments).
  bool parse_tool_calls = false;
  ToolCallFormat tool_format = ToolCallFormat::kJson;
  std::string tool_named;
  // The request named LoRA scales (llama-server's 'lora'): params.lora_scales
  // holds one per adapter; otherwise the server's current scales apply.
  bool lora_given = false;
};

struct ParseContext {
  const Tokenizer* tokenizer = nullptr;
  ChatTemplate chat_template;               // the server's (--chat-template / the model's)
  bool trust_request_chat_template = false;  // honour a request's own 'chat_template'
  // How replies write tool calls (--tool-call-parser, else recognized from
  // the server's template); explicit: also for per-request templates.
  ToolCallFormat tool_format = ToolCallFormat::kJson;
  bool tool_format_explicit = false;
  ParseLimits limits;
  // The request came to llama-server's /completion (CompletionSpec::native).
  bool native = false;
  // Chat: also render the prompt as text into CompletionSpec::chat_text
  // (POST /apply-template).
  bool render_chat_text = false;
};

// Parses `body` (JSON text). On failure returns false with *err set.
bool ParseCompletionRequest(const std::string& body, bool chat, const ParseContext& ctx, CompletionSpec* out,
                            ApiError* err);

// Refuses (400 naming the field) fields of OpenAI, vLLM or llama.cpp
// requests that would change the output and that infera does not implement
// (grammar, json_schema, guided_*, suffix, ...) unless they hold their no-op
// value, and no-effect fields of the wrong type; passes unknown fields. Also
// used for `infera generate` input lines.
bool CheckUnsupportedFields(const nlohmann::json& body, bool chat, ApiError* err);
// Whether `name` is a refused or no-effect field (CheckUnsupportedFields
// passed it: a no-op value or no effect).
bool IsUnsupportedField(const std::string& name);

// Parses a JSON body; on failure *err is a 400.
bool ParseJsonBody(const std::string& body, nlohmann::json* out, ApiError* err);
// The same, keeping the order of the object's keys (bodies translated into
// another request: JSON schemas' properties keep their order).
bool ParseJsonBody(const std::string& body, nlohmann::ordered_json* out, ApiError* err);

}  // namespace infera::server
