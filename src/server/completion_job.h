// One /v1/completions, /v1/chat/completions or /completion request in flight: its choices
// (n per prompt), each an engine request, and the response they build up —
// server-sent event chunks as tokens arrive, or one JSON object at the end.
//
// Thread-safety: outputs arrive on the engine loop thread, the disconnect
// notice on an I/O thread; everything is guarded by one mutex. Owned jointly
// by the engine callbacks and the disconnect handler (shared_ptr).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "server/server_metrics.h"
#include "server/tracing.h"

namespace infera::server {

// A text's bytes as a JSON array of numbers (the "bytes" of OpenAI's and
// llama-server's token entries).
nlohmann::json ByteArray(const std::string& s);

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  using Clock = std::chrono::steady_clock;
  // Where the job reports: metrics, its log line, its spans.
  struct Observability {
    ServerMetrics* metrics = nullptr;
    TraceContext trace;
    OtlpExporter* exporter = nullptr;  // may be null
    bool log_request = true;           // an info line when it finishes (sampling)
    bool log_prompts = false;
    std::string endpoint;
  };
  CompletionJob(CompletionSpec spec, std::shared_ptr<Responder> resp, AsyncEngine* engine, const Tokenizer* tok,
                std::string id, int64_t created, std::string model, Observability obs);

  // OpenAI's Responses API (/v1/responses; n = 1, a chat request): the answer
  // is a response object, streamed as Responses events, and kept in `store`
  // (may be null) when the turn asks so. Call before Start.
  void SetResponses(std::shared_ptr<const ResponsesTurn> turn, ResponsesStore* store);

  // Submits every choice to the engine and opens the stream; on failure
  // answers with the error (and cancels what was submitted).
  void Start();
  // The client is gone: cancel every choice.
  void CancelAll();

 private:
  struct Choice {
    size_t prompt_index = 0;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<int32_t> tokens;                // /completion with return_tokens, unstreamed: the generated ids
    std::vector<TokenLogprob> prompt_logprobs;  // echo with logprobs: prompt tokens 1, 2, ...
    bool echo_sent = false;                     // streaming: the prompt text went out
    size_t text_offset = 0;  // bytes of text so far (for completions logprobs)
    const char* finish_reason = nullptr;
    bool done = false;
    bool role_sent = false;
    int32_t completion_tokens = 0;
    int32_t cached_tokens = 0;
    bool has_first = false;
    Clock::time_point t_first, t_last, t_done;
    double queue_s = 0;
    bool siblings_submitted = false;  // first choice of a prompt: the other n - 1 were submitted
    std::string log_text;  // the output, kept for the log line with --log-prompts when streaming
    std::shared_ptr<ToolCallStream> tool_stream;  // streaming with tools: holds back call text
    std::string stop_string;                      // the stop string that ended it ("": none)
    int32_t stop_token = -1;                      // ... or the stop_token_ids entry (-1: none)
    double prefill_s = 0;                         // first scheduled to first token
    int anthropic_blocks = 0;                     // /v1/messages streaming: content blocks finished
    bool anthropic_text_open = false;             // ... and a text block started, not stopped
  };

  // Submits choice `index` to the engine. Requires mu_.
  Status SubmitChoice(size_t index);
  // Submits choices first+1 .. first+n-1 (after choice `first` computed the
  // prompt), or ends them if the client left or the engine refuses. Requires mu_.
  void SubmitSiblings(size_t first);
  void OnOutput(size_t index, const RequestOutput& o);
  // Tool calls: the seed of choice `index`'s call ids; a finished reply split
  // into content and calls; a streamed tool_calls delta.
  uint64_t ToolCallSeed(size_t index) const;
  ParsedReply ReplyWithTools(const Choice& c, size_t index) const;
  void SendToolCalls(size_t index, const std::vector<ToolCall>& calls);
  // Latency and token metrics of one output of a choice. Requires mu_.
  void RecordTiming(Choice& c, const RequestOutput& o);
  // Requires mu_.
  // with_prompt (completions, echo): lps starts with the prompt's entries
  // (tokens 1, 2, ...); every prompt token is listed, the first with null
  // log-probabilities, at its offset in the echoed text.
  nlohmann::json LogprobsJson(Choice& c, const std::vector<TokenLogprob>& lps, bool with_prompt = false) const;
  // vLLM's prompt_logprobs of choice `c`: [null, {"id": {"logprob", "rank",
  // "decoded_token"}, ...} per prompt token after the first].
  nlohmann::json PromptLogprobsJson(const Choice& c) const;
  // echo with logprobs: the prompt's tokens, then the generated ones.
  bool EchoLogprobs() const { return spec_.echo && spec_.logprobs; }
  // Token counts of the request (prompts once each, all choices' outputs).
  struct Totals {
    int64_t prompt = 0, completion = 0, cached = 0;
  };
  Totals Count() const;
  nlohmann::json Usage() const;
  void SendChunk(size_t index, const std::string& text, const nlohmann::json& logprobs, const char* finish);
  // llama-server's final /completion object for choice `index` with
  // `content` (its whole text; "" as the last chunk of a stream, which also
  // leaves out tokens and probabilities, sent with the chunks).
  nlohmann::json NativeResult(size_t index, const std::string& content) const;
  // A streamed /completion chunk of choice `index`: output `o`'s text,
  // tokens (return_tokens) and probabilities (n_probs).
  void SendNativeChunk(size_t index, const std::string& text, const RequestOutput& o);
  // llama-server's completion_probabilities of `lps`: per token {id, token,
  // bytes, logprob, top_logprobs}, or with post_sampling_probs {..., prob,
  // top_probs}.
  nlohmann::json NativeProbs(const std::vector<TokenLogprob>& lps) const;
  // vLLM's stop_reason: the stop string that ended the choice, else null.
  static nlohmann::json StopReason(const Choice& c);
  void SendEvent(const nlohmann::json& j);
  // Anthropic's /v1/messages: a named server-sent event; streamed text,
  // tool_use blocks and the closing events of choice `index`; the whole
  // message of choice `c` (unstreamed).
  void SendNamedEvent(const char* name, const nlohmann::json& j);
  void AnthropicText(size_t index, const std::string& text);
  void AnthropicToolUse(size_t index, const std::vector<ToolCall>& calls);
  void AnthropicStreamEnd(size_t index);
  nlohmann::json AnthropicMessage(const Choice& c, size_t index) const;
  // The Responses API: a named event (type and sequence_number added); the
  // opening events; streamed text (logprobs: the chat shape's, may be null)
  // and function calls; the message item's closing events; what the
  // response produced; the final object (also stored) or the failure.
  void ResponsesEvent(const char* type, nlohmann::ordered_json j);
  void ResponsesStreamStart();
  void ResponsesText(const std::string& text, const nlohmann::json& logprobs);
  void ResponsesToolCalls(const std::vector<ToolCall>& calls);
  void ResponsesCloseMessage();
  ResponsesOutput ResponsesResult() const;
  void ResponsesFinish();
  void Finish();
  // The request's log line and spans (at Finish). Requires mu_.
  void Report(int status);

  const CompletionSpec spec_;
  const std::shared_ptr<Responder> resp_;
  AsyncEngine* const engine_;
  const Tokenizer* const tok_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const Observability obs_;
  ServerMetrics* const metrics_;
  const Clock::time_point arrival_ = Clock::now();
  const std::chrono::system_clock::time_point arrival_wall_ = std::chrono::system_clock::now();
  Clock::time_point submitted_;

  std::mutex mu_;
  std::vector<Choice> choices_;
  std::vector<uint64_t> engine_ids_;
  size_t remaining_ = 0;
  bool failed_ = false;   // answered with an error; later outputs are ignored
  bool cancelled_ = false;  // the client left
  std::string error_;     // a choice failed in the engine
  bool unavailable_ = false;  // ... because the server cannot serve now (503)
  bool not_found_ = false;    // ... because what it named is gone (a LoRA adapter unloaded since: 404)

  struct ResponsesState {
    std::shared_ptr<const ResponsesTurn> turn;
    ResponsesStore* store = nullptr;  // may be null
    std::string id_suffix;            // of the item ids (msg_..., fc_...)
    int64_t seq = 0;                  // the next event's sequence_number
    ResponsesOutput out;              // streamed so far
    bool message_open = false;        // the message item was added, not done
  };
  std::unique_ptr<ResponsesState> responses_;  // null: not the Responses API
};

}  // namespace infera::server
