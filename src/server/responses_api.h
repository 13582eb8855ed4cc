// OpenAI's Responses API (POST /v1/responses, GET / DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items, POST
// /v1/responses/input_tokens), as vLLM serves it: a request is translated to
// an OpenAI chat completion request, which the server runs as any other; the
// answer is written back as a response object with output items (a message
// with output_text, function_call items), streamed as Responses events
// (completion_job_responses.cc). Responses are kept in memory (ResponsesStore)
// for GET and for previous_response_id, which continues a stored
// conversation. No I/O, no engine.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace infera::server {

// A finished response as kept for GET /v1/responses/{id} and
// previous_response_id. Immutable once stored.
struct StoredResponse {
  nlohmann::ordered_json response;  // the response object as answered
  // The conversation up to and including this response's output, as chat
  // messages (user / assistant / tool; without the instructions, which a
  // follow-up request does not inherit).
  nlohmann::ordered_json history;
  nlohmann::ordered_json input_items;  // this request's input items, with ids
};

// In-memory responses, least recently used dropped beyond `capacity`
// (serve --responses-store; 0 stores nothing). Each entry holds its whole
// conversation, so a follow-up works even after its ancestors were dropped;
// a conversation is bounded by the context length.
// Thread-safe.
class ResponsesStore {
 public:
  explicit ResponsesStore(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  void Put(const std::string& id, std::shared_ptr<const StoredResponse> r);
  // Null when unknown, dropped or deleted.
  std::shared_ptr<const StoredResponse> Get(const std::string& id);
  bool Erase(const std::string& id);
  size_t size();

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const StoredResponse>>;
  const size_t capacity_;
  std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// A Responses request, translated.
struct ResponsesTurn {
  std::string chat_body;  // the chat completion request to run (JSON text)
  // The request's settings as the response object repeats them
  // (instructions, max_output_tokens, metadata, tools, tool_choice, text,
  // temperature, top_p, ...; defaults filled in).
  nlohmann::ordered_json echo;
  nlohmann::ordered_json history;      // chat messages before this turn's output (no instructions)
  nlohmann::ordered_json input_items;  // the input as items, ids added
  bool store = true;
  bool logprobs = false;  // include: message.output_text.logprobs
};

// Translates a Responses request body (JSON text) into a chat completion
// request: instructions -> a system message; input (a string, or items:
// messages with input_text / output_text parts, function_call,
// function_call_output; reasoning items are skipped) -> messages, after the
// stored conversation of previous_response_id (looked up in `store`, which
// may be null); max_output_tokens, temperature, top_p, function tools and
// tool_choice (also allowed_tools), parallel_tool_calls, text.format (text,
// json_object, json_schema), top_logprobs with include
// message.output_text.logprobs, stream, user / safety_identifier, and vLLM's
// sampling extras (top_k, min_p, seed, stop, penalties, priority). Images,
// files, built-in tools, background, conversation, prompt templates and
// truncation "auto" are refused. count_tokens (POST
// /v1/responses/input_tokens): only rendered and counted. `id_suffix` makes
// the input items' ids. On failure returns false with *err (400 naming the
// field; 404 for an unknown previous_response_id).
bool ResponsesToChatRequest(const std::string& body, ResponsesStore* store, bool count_tokens,
                            const std::string& id_suffix, ResponsesTurn* out, ApiError* err);

// A chat parse error's field, named as the Responses API names it
// (max_tokens -> max_output_tokens, messages -> input, response_format ->
// text.format, ...).
std::string ResponsesParam(const std::string& chat_param);

// What a response produced, and the pieces of its response object.
struct ResponsesOutput {
  std::string text;                 // the message's output_text ("": no message item)
  nlohmann::ordered_json logprobs;  // the text's logprobs (array; with ResponsesTurn::logprobs)
  std::vector<ToolCall> calls;      // function_call items, after the message
};

// The output items of `out`: a message (id msg_<suffix>) when there is text,
// then one function_call per call (id fc_<suffix>_<i>, call_id the call's
// id). status: "completed", "incomplete" or "in_progress".
nlohmann::ordered_json ResponsesMessageItem(const std::string& id_suffix, const ResponsesOutput& out,
                                            const char* status, bool with_logprobs);
nlohmann::ordered_json ResponsesCallItem(const std::string& id_suffix, size_t i, const ToolCall& call,
                                         const char* status);
nlohmann::ordered_json ResponsesOutputItems(const std::string& id_suffix, const ResponsesOutput& out,
                                            const char* status, bool with_logprobs);

// The response object. status: "in_progress" (no usage yet), "completed",
// "incomplete" (incomplete_details: max_output_tokens) or "failed" (error:
// server_error with `error_message`).
struct ResponsesUsage {
  int64_t input = 0, cached = 0, output = 0;
};
nlohmann::ordered_json ResponseObject(const ResponsesTurn& turn, const std::string& id, int64_t created_at,
                                      const std::string& model, const char* status, nlohmann::ordered_json output,
                                      const ResponsesUsage* usage, const std::string& error_message = "");

// The conversation after this response: the turn's history plus the output
// as an assistant message (content and tool_calls), for a follow-up.
nlohmann::ordered_json ResponsesHistoryAfter(const ResponsesTurn& turn, const ResponsesOutput& out);

}  // namespace infera::server
