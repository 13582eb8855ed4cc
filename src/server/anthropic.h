// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
// as llama-server and vLLM serve it for Anthropic clients (Claude Code, the
// anthropic SDK): the request is translated to an OpenAI chat completion
// request, which the server runs as any other; the answer is written back in
// Anthropic's shape (completion_job.cc). No I/O, no engine.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace infera::server {

// Translates an Anthropic Messages request body (JSON text) into an OpenAI
// chat completion request: system -> a system message; user / assistant
// content blocks: text -> content, tool_use -> tool_calls, tool_result ->
// tool messages; tools (input_schema) and tool_choice (auto / any / tool /
// none, disable_parallel_tool_use); max_tokens, stop_sequences,
// temperature, top_p, top_k, stream, metadata.user_id. Images, documents and
// enabled extended thinking are refused. count_tokens: max_tokens may be
// absent (the request is only rendered and counted). On failure returns false
// with *err (400 naming the field).
bool AnthropicToChatRequest(const std::string& body, bool count_tokens, std::string* chat_body, ApiError* err);

// An OpenAI-style error body (ApiError::ToJson) rewritten as Anthropic's:
// {"type": "error", "error": {"type": "invalid_request_error" |
// "authentication_error" | "not_found_error" | "rate_limit_error" |
// "api_error" | "overloaded_error" | ..., "message"}} (by HTTP status).
std::string AnthropicErrorBody(int status, const std::string& openai_body);

// Anthropic's stop_reason for an OpenAI finish reason ("stop" with a stop
// string: stop_sequence; "stop": end_turn; "length": max_tokens;
// "tool_calls": tool_use).
const char* AnthropicStopReason(const char* finish_reason, bool stopped_by_string);

}  // namespace infera::server
