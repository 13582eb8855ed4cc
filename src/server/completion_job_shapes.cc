// CompletionJob's answers in llama-server's shape (/completion, /infill:
// its final objects, chunks and completion_probabilities) and in Anthropic's
// (/v1/messages: content blocks and named events); completion_job.cc has the
// OpenAI shapes and the request's life. Same locking rules: every function
// here requires mu_.
#include <cmath>

#include "base/json.h"
#include "server/anthropic.h"
#include "server/completion_job.h"
#include "tokenizer/utf8.h"

namespace infera::server {

using nlohmann::json;

json CompletionJob::NativeProbs(const std::vector<TokenLogprob>& lps) const {
  const bool post = spec_.params.logprobs_processed;
  auto entry = [&](int32_t id, float logprob) {
    const std::string piece = tok_->TokenToPiece(id, true);
    // As llama-server: the text up to a character cut at the piece's end, all the bytes.
    json e = {
        {"id", id}, {"token", piece.substr(0, piece.size() - Utf8IncompleteTail(piece))}, {"bytes", ByteArray(piece)}};
    if (post) {
      e["prob"] = std::exp(logprob);
    } else {
      e["logprob"] = logprob;
    }
    return e;
  };
  json out = json::array();
  for (const TokenLogprob& lp : lps) {
    json e = entry(lp.token, lp.logprob);
    json top = json::array();
    for (const auto& [t, l] : lp.top) top.push_back(entry(t, l));
    e[post ? "top_probs" : "top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

json CompletionJob::NativeResult(size_t index, const std::string& content) const {
  const Choice& c = choices_[index];
  const bool last_chunk = spec_.stream;
  const int64_t prompt_tokens = static_cast<int64_t>(spec_.prompts[c.prompt_index].size());
  // llama-server's timings: the prompt tokens computed (not those from the
  // cache) and the generated ones, with their milliseconds.
  const int64_t prompt_n = prompt_tokens - c.cached_tokens;
  const double prompt_ms = c.prefill_s * 1e3;
  const double predicted_ms =
      c.has_first ? std::chrono::duration<double, std::milli>(c.t_done - c.t_first).count() : 0.0;
  const int32_t predicted_n = c.completion_tokens;
  const json timings = {{"prompt_n", prompt_n},
                        {"prompt_ms", prompt_ms},
                        {"prompt_per_token_ms", prompt_n > 0 ? prompt_ms / prompt_n : 0.0},
                        {"prompt_per_second", prompt_ms > 0 ? 1e3 * prompt_n / prompt_ms : 0.0},
                        {"predicted_n", predicted_n},
                        {"predicted_ms", predicted_ms},
                        {"predicted_per_token_ms", predicted_n > 0 ? predicted_ms / predicted_n : 0.0},
                        {"predicted_per_second", predicted_ms > 0 ? 1e3 * predicted_n / predicted_ms : 0.0}};
  const std::string finish = c.finish_reason ? c.finish_reason : "";
  const char* stop_type = finish == "stop" ? (c.stop_string.empty() ? "eos" : "word") : "limit";
  json result = {{"index", index},
                 {"content", content},
                 {"tokens", last_chunk || !spec_.return_tokens ? json::array() : json(c.tokens)},
                 {"id_slot", -1},
                 {"stop", true},
                 {"model", model_},
                 {"tokens_predicted", predicted_n},
                 {"tokens_evaluated", prompt_tokens},
                 {"tokens_cached", c.cached_tokens},
                 {"prompt", spec_.prompt_texts[c.prompt_index]},
                 {"truncated", false},
                 {"stop_type", stop_type},
                 {"stopping_word", c.stop_string},
                 {"timings", timings}};
  if (!last_chunk && spec_.logprobs) result["completion_probabilities"] = NativeProbs(c.logprobs);
  return result;
}

void CompletionJob::SendNativeChunk(size_t index, const std::string& text, const RequestOutput& o) {
  const Choice& c = choices_[index];
  json chunk = {{"index", index},
                {"content", text},
                {"tokens", spec_.return_tokens ? json(o.tokens) : json::array()},
                {"stop", false},
                {"id_slot", -1},
                {"tokens_predicted", c.completion_tokens},
                {"tokens_evaluated", spec_.prompts[c.prompt_index].size()}};
  if (spec_.logprobs) chunk["completion_probabilities"] = NativeProbs(o.logprobs);
  SendEvent(chunk);
}

void CompletionJob::SendNamedEvent(const char* name, const json& j) {
  resp_->Send(std::string("event: ") + name + "\ndata: " + DumpJson(j) + "\n\n");
}

void CompletionJob::AnthropicText(size_t index, const std::string& text) {
  Choice& c = choices_[index];
  if (!c.anthropic_text_open) {
    SendNamedEvent("content_block_start", {{"type", "content_block_start"},
                                           {"index", c.anthropic_blocks},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
    c.anthropic_text_open = true;
  }
  SendNamedEvent("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", c.anthropic_blocks},
                                         {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

void CompletionJob::AnthropicToolUse(size_t index, const std::vector<ToolCall>& calls) {
  Choice& c = choices_[index];
  if (c.anthropic_text_open) {
    SendNamedEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", c.anthropic_blocks++}});
    c.anthropic_text_open = false;
  }
  for (const ToolCall& call : calls) {
    const int block = c.anthropic_blocks++;
    SendNamedEvent(
        "content_block_start",
        {{"type", "content_block_start"},
         {"index", block},
         {"content_block", {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object()}}}});
    SendNamedEvent("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", block},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
    SendNamedEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", block}});
  }
}

void CompletionJob::AnthropicStreamEnd(size_t index) {
  Choice& c = choices_[index];
  if (c.anthropic_text_open) {
    SendNamedEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", c.anthropic_blocks++}});
    c.anthropic_text_open = false;
  }
  const char* reason = AnthropicStopReason(c.finish_reason, !c.stop_string.empty());
  SendNamedEvent("message_delta", {{"type", "message_delta"},
                                   {"delta", {{"stop_reason", reason}, {"stop_sequence", StopReason(c)}}},
                                   {"usage", {{"output_tokens", c.completion_tokens}}}});
  SendNamedEvent("message_stop", {{"type", "message_stop"}});
}

json CompletionJob::AnthropicMessage(const Choice& c, size_t index) const {
  json content = json::array();
  std::vector<ToolCall> calls;
  std::string text = c.text;
  if (spec_.parse_tool_calls) {
    ParsedReply r = ReplyWithTools(c, index);
    text = r.content;
    calls = r.calls;
  }
  if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
  for (const ToolCall& call : calls) {
    json input = ParseJson(call.arguments);
    if (input.is_discarded() || !input.is_object()) input = json::object();  // (a call's arguments are an object)
    content.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}});
  }
  const bool tool_use = !calls.empty() && c.finish_reason != nullptr && std::string(c.finish_reason) == "stop";
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", std::move(content)},
          {"stop_reason", tool_use ? "tool_use" : AnthropicStopReason(c.finish_reason, !c.stop_string.empty())},
          {"stop_sequence", tool_use ? json(nullptr) : StopReason(c)},
          {"usage",
           {{"input_tokens", spec_.prompts[c.prompt_index].size()},
            {"output_tokens", c.completion_tokens},
            {"cache_read_input_tokens", c.cached_tokens}}}};
}

}  // namespace infera::server
