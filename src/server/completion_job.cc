#include "server/completion_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "base/json.h"
#include "base/logging.h"
#include "server/anthropic.h"

namespace infera::server {

using nlohmann::json;

json ByteArray(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

CompletionJob::CompletionJob(CompletionSpec spec, std::shared_ptr<Responder> resp, AsyncEngine* engine,
                             const Tokenizer* tok, std::string id, int64_t created, std::string model,
                             Observability obs)
    : spec_(std::move(spec)), resp_(std::move(resp)), engine_(engine), tok_(tok), id_(std::move(id)),
      created_(created), model_(std::move(model)), obs_(std::move(obs)), metrics_(obs_.metrics) {
  for (size_t p = 0; p < spec_.prompts.size(); ++p) {
    for (int32_t i = 0; i < spec_.n; ++i) {
      Choice c;
      c.prompt_index = p;
      choices_.push_back(std::move(c));
    }
  }
  remaining_ = choices_.size();
}

Status CompletionJob::SubmitChoice(size_t index) {
  RequestParams params = spec_.params;
  // Choices of one request differ, yet stay reproducible with a seed.
  if (params.sampling.has_seed) params.sampling.seed += index % static_cast<size_t>(spec_.n);
  auto self = shared_from_this();
  auto id = engine_->Submit(spec_.prompts[choices_[index].prompt_index], params,
                            [self, index](const RequestOutput& o) { self->OnOutput(index, o); });
  if (!id.ok()) return id.status();
  engine_ids_.push_back(*id);
  return Status::Ok();
}

void CompletionJob::Start() {
  std::lock_guard<std::mutex> lock(mu_);  // outputs wait until the choices are in and the stream is open
  submitted_ = Clock::now();
  // The first choice of each prompt now; its siblings once it has computed
  // the prompt (see SubmitSiblings), so they find its blocks in the prefix cache.
  for (size_t index = 0; index < choices_.size(); index += static_cast<size_t>(spec_.n)) {
    Status st = SubmitChoice(index);
    if (!st.ok()) {
      for (uint64_t e : engine_ids_) engine_->Cancel(e);
      ApiError err;
      err.message = st.message();
      err.param = spec_.chat ? "messages" : "prompt";
      if (st.code() == StatusCode::kUnavailable) {
        err.status = 503;
        err.type = "service_unavailable";
        err.code = "shutting_down";
        err.param.clear();
      } else if (st.code() == StatusCode::kResourceExhausted) {
        // Could never run, however long it waited: the whole KV cache is too small.
        err.code = "kv_cache_capacity_exceeded";
      } else if (st.code() == StatusCode::kOutOfRange) {
        err.code = "context_length_exceeded";
      } else {
        err.code = "invalid_value";
      }
      failed_ = true;
      resp_->Respond(err.status, "application/json", err.ToJson());
      return;
    }
  }
  if (spec_.stream) {
    resp_->BeginStream(200, "text/event-stream");
    if (responses_) ResponsesStreamStart();
    if (spec_.anthropic) {
      SendNamedEvent("message_start",
                     {{"type", "message_start"},
                      {"message",
                       {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", spec_.prompts[0].size()}, {"output_tokens", 0}}}}}});
    }
    if (spec_.echo && !EchoLogprobs()) {  // with logprobs: once the prompt's are computed (OnOutput)
      for (size_t i = 0; i < choices_.size(); ++i) {
        SendChunk(i, spec_.prompt_texts[choices_[i].prompt_index], nullptr, nullptr);
        choices_[i].echo_sent = true;
      }
    }
  }
}

void CompletionJob::SubmitSiblings(size_t first) {
  const size_t n = static_cast<size_t>(spec_.n);
  for (size_t index = first + 1; index < first + n; ++index) {
    Status st = cancelled_ ? Status(StatusCode::kCancelled, "cancelled") : SubmitChoice(index);
    if (st.ok()) continue;
    // Never reaches the engine: the choice ends here.
    Choice& c = choices_[index];
    c.done = true;
    if (cancelled_) {
      c.finish_reason = "abort";
    } else {
      c.finish_reason = "error";
      error_ = st.message();
    }
    --remaining_;
  }
}

void CompletionJob::CancelAll() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    ids = engine_ids_;
  }
  for (uint64_t id : ids) engine_->Cancel(id);
}

json CompletionJob::LogprobsJson(Choice& c, const std::vector<TokenLogprob>& lps, bool with_prompt) const {
  if (spec_.chat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string piece = tok_->TokenToPiece(lp.token, true);
      json top = json::array();
      for (const auto& [t, l] : lp.top) {
        const std::string p = tok_->TokenToPiece(t, true);
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", ByteArray(p)}});
      }
      content.push_back(
          {{"token", piece}, {"logprob", lp.logprob}, {"bytes", ByteArray(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  auto add = [&](const TokenLogprob& lp) {
    token_logprobs.push_back(lp.logprob);
    json top = json::object();
    // (A prompt's entries may carry more: the engine computed prompt_logprobs' k.)
    const size_t k = std::min(lp.top.size(), static_cast<size_t>(std::max(spec_.params.logprobs, 0)));
    for (size_t i = 0; i < k; ++i) top[tok_->TokenToPiece(lp.top[i].first, true)] = lp.top[i].second;
    top_logprobs.push_back(top);
  };
  size_t next = 0;  // the first entry of lps not listed yet
  if (with_prompt) {
    // Offsets in the echoed text: the length of the text the tokens before
    // each decode to (BOS and the dummy-prefix space take no room there).
    const std::vector<int32_t>& prompt = spec_.prompts[c.prompt_index];
    const std::string& text = spec_.prompt_texts[c.prompt_index];
    StreamDecoder decoded(*tok_, /*at_start=*/true);
    size_t offset = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      tokens.push_back(tok_->TokenToPiece(prompt[i], true));
      if (i > 0 && next < lps.size()) {
        add(lps[next++]);
      } else {
        token_logprobs.push_back(nullptr);
        top_logprobs.push_back(nullptr);
      }
      offsets.push_back(std::min(offset, text.size()));
      offset += decoded.Push(prompt[i]).size();
    }
    c.text_offset = text.size();
  }
  for (size_t j = next; j < lps.size(); ++j) {
    const TokenLogprob& lp = lps[j];
    const std::string piece = tok_->TokenToPiece(lp.token, true);
    tokens.push_back(piece);
    add(lp);
    offsets.push_back(c.text_offset);
    c.text_offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json CompletionJob::PromptLogprobsJson(const Choice& c) const {
  json out = json::array({nullptr});  // the first token has no context
  for (const TokenLogprob& lp : c.prompt_logprobs) {
    json entry = json::object();
    auto put = [&](int32_t id, float logprob, int32_t rank) {
      entry[std::to_string(id)] = {
          {"logprob", logprob}, {"rank", rank}, {"decoded_token", tok_->TokenToPiece(id, true)}};
    };
    const size_t k = std::min(lp.top.size(), static_cast<size_t>(spec_.prompt_logprobs));
    for (size_t i = 0; i < k; ++i) put(lp.top[i].first, lp.top[i].second, lp.TopRank(i));
    put(lp.token, lp.logprob, lp.rank);
    out.push_back(std::move(entry));
  }
  return out;
}

CompletionJob::Totals CompletionJob::Count() const {
  Totals t;
  for (const auto& p : spec_.prompts) t.prompt += static_cast<int64_t>(p.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    t.completion += choices_[i].completion_tokens;
    // Each prompt once: its first choice's prefix-cache hits.
    if (i % static_cast<size_t>(spec_.n) == 0) t.cached += choices_[i].cached_tokens;
  }
  return t;
}

json CompletionJob::Usage() const {
  const Totals t = Count();
  return {{"prompt_tokens", t.prompt},
          {"completion_tokens", t.completion},
          {"total_tokens", t.prompt + t.completion},
          {"prompt_tokens_details", {{"cached_tokens", t.cached}}}};
}

void CompletionJob::SendEvent(const json& j) { resp_->Send("data: " + DumpJson(j) + "\n\n"); }

json CompletionJob::StopReason(const Choice& c) {
  if (c.stop_token >= 0) return c.stop_token;  // vLLM: the stop token's id
  return c.stop_string.empty() ? json(nullptr) : json(c.stop_string);
}

void CompletionJob::SendChunk(size_t index, const std::string& text, const json& logprobs, const char* finish) {
  if (responses_) {
    if (!text.empty()) {
      ResponsesText(text, logprobs);
    } else if (logprobs.is_object() && logprobs.contains("content")) {  // (text held back for tool calls)
      for (const json& lp : logprobs["content"]) responses_->out.logprobs.push_back(nlohmann::ordered_json(lp));
    }
    if (finish != nullptr) ResponsesCloseMessage();
    return;
  }
  if (spec_.anthropic) {
    if (!text.empty()) AnthropicText(index, text);
    if (finish != nullptr) AnthropicStreamEnd(index);
    return;
  }
  if (spec_.native) {
    // (Chunks with text go out by SendNativeChunk.) The choice's final
    // object, with empty content.
    if (finish != nullptr) SendEvent(NativeResult(index, ""));
    return;
  }
  json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", nullptr}, {"stop_reason", nullptr}};
  if (finish != nullptr) {
    choice["finish_reason"] = finish;
    // (A reply that became tool calls has no stop string to name, as unstreamed.)
    if (std::string_view(finish) != "tool_calls") choice["stop_reason"] = StopReason(choices_[index]);
  }
  json chunk = {{"id", id_}, {"created", created_}, {"model", model_}};
  if (spec_.chat) {
    chunk["object"] = "chat.completion.chunk";
    json delta = json::object();
    Choice& c = choices_[index];
    if (!c.role_sent) {
      delta["role"] = "assistant";
      c.role_sent = true;
    }
    if (!text.empty() || (finish == nullptr && delta.contains("role"))) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    chunk["object"] = "text_completion";
    choice["text"] = text;
  }
  chunk["choices"] = json::array({choice});
  if (spec_.include_usage) chunk["usage"] = nullptr;
  SendEvent(chunk);
}

uint64_t CompletionJob::ToolCallSeed(size_t index) const {
  return std::hash<std::string>{}(id_) ^ (0x9E3779B97F4A7C15ull * (index + 1));
}

ParsedReply CompletionJob::ReplyWithTools(const Choice& c, size_t index) const {
  if (spec_.tool_format == ToolCallFormat::kJson && !spec_.tool_named.empty()) {
    // vLLM's named choice: the constrained reply is the arguments object.
    ParsedReply r;
    r.calls.push_back({ToolCallId(ToolCallFormat::kJson, ToolCallSeed(index), 0), spec_.tool_named, c.text});
    return r;
  }
  return ParseToolCalls(spec_.tool_format, c.text, ToolCallSeed(index));
}

void CompletionJob::SendToolCalls(size_t index, const std::vector<ToolCall>& calls) {
  if (spec_.anthropic) return AnthropicToolUse(index, calls);
  if (responses_) return ResponsesToolCalls(calls);
  json list = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = ToolCallJson(calls[i]);
    call["index"] = i;
    list.push_back(std::move(call));
  }
  json chunk = {{"id", id_}, {"created", created_}, {"model", model_}, {"object", "chat.completion.chunk"}};
  chunk["choices"] = json::array(
      {{{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"delta", {{"tool_calls", list}}}}});
  if (spec_.include_usage) chunk["usage"] = nullptr;
  SendEvent(chunk);
}

void CompletionJob::RecordTiming(Choice& c, const RequestOutput& o) {
  const auto now = Clock::now();
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (!o.tokens.empty()) {
    metrics_->GenerationTokens(static_cast<int64_t>(o.tokens.size()));
    if (!c.has_first) {
      c.has_first = true;
      c.t_first = now;
      metrics_->FirstToken(secs(arrival_, now));
    } else {
      metrics_->InterToken(secs(c.t_last, now));
    }
    c.t_last = now;
  }
  if (!o.finished) return;
  c.t_done = now;
  c.queue_s = o.queue_seconds;
  ServerMetrics::Finished f;
  f.finish_reason = OpenAiFinishReason(o.finish_reason);
  f.prompt_tokens = o.prompt_tokens;
  f.completion_tokens = o.completion_tokens;
  f.queue_s = o.queue_seconds;
  f.prefill_s = o.ttft_seconds;
  f.decode_s = c.has_first ? secs(c.t_first, now) : 0.0;
  f.e2e_s = secs(arrival_, now);
  f.tpot_s = o.completion_tokens >= 2 ? f.decode_s / (o.completion_tokens - 1) : -1.0;
  metrics_->RequestFinished(f);
}

void CompletionJob::OnOutput(size_t index, const RequestOutput& o) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return;
  Choice& c = choices_[index];
  if (spec_.n > 1 && index % static_cast<size_t>(spec_.n) == 0 && !c.siblings_submitted) {
    // The prompt is computed (or the choice ended): the other choices follow.
    c.siblings_submitted = true;
    SubmitSiblings(index);
  }
  c.completion_tokens = o.completion_tokens;
  c.cached_tokens = o.cached_tokens;
  RecordTiming(c, o);
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
  if (spec_.stream && !c.echo_sent && EchoLogprobs() && (!o.tokens.empty() || o.finished) &&
      o.finish_reason != FinishReason::kError) {
    // Every prompt row is in by the step that samples (or ends) the request.
    SendChunk(index, spec_.prompt_texts[c.prompt_index], LogprobsJson(c, c.prompt_logprobs, true), nullptr);
    c.echo_sent = true;
  }
  if (spec_.stream) {
    // With tools, text that may be a tool call is held back until the reply
    // ends, then sent as tool_calls deltas.
    std::string text = o.text;
    if (spec_.parse_tool_calls) {
      if (!c.tool_stream) c.tool_stream = std::make_shared<ToolCallStream>(spec_.tool_format, ToolCallSeed(index));
      text = c.tool_stream->Feed(o.text);
    }
    if (spec_.native) {
      const bool per_token = spec_.logprobs || spec_.return_tokens;
      if (!text.empty() || (per_token && !o.tokens.empty())) SendNativeChunk(index, text, o);
    } else if (!text.empty() || !o.logprobs.empty() || (spec_.chat && !c.role_sent)) {
      const json lp = spec_.logprobs && !o.logprobs.empty() ? LogprobsJson(c, o.logprobs) : json(nullptr);
      SendChunk(index, text, lp, nullptr);
    }
    if (obs_.log_prompts) c.log_text += o.text;
  } else {
    c.text += o.text;
    c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    if (spec_.return_tokens) c.tokens.insert(c.tokens.end(), o.tokens.begin(), o.tokens.end());
  }
  if (!o.finished) return;
  c.done = true;
  c.finish_reason = OpenAiFinishReason(o.finish_reason);
  c.stop_string = o.stop_string;
  c.stop_token = o.stop_token;
  c.prefill_s = o.ttft_seconds;
  if (o.finish_reason == FinishReason::kError) {
    error_ = o.error;
    unavailable_ = o.error_code == StatusCode::kUnavailable;
    not_found_ = o.error_code == StatusCode::kNotFound;
  }
  if (spec_.stream && o.finish_reason != FinishReason::kError) {
    if (spec_.parse_tool_calls && c.tool_stream) {
      ParsedReply r = c.tool_stream->Finish();
      if (!r.content.empty()) SendChunk(index, r.content, nullptr, nullptr);
      if (!r.calls.empty()) {
        SendToolCalls(index, r.calls);
        if (o.finish_reason == FinishReason::kStop) c.finish_reason = "tool_calls";
      }
    }
    SendChunk(index, "", nullptr, c.finish_reason);
  }
  if (--remaining_ == 0) Finish();
}

void CompletionJob::Report(int status) {
  auto wall = [&](Clock::time_point t) {
    return UnixNanos(arrival_wall_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - arrival_));
  };
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto now = Clock::now();
  const Totals totals = Count();
  const Choice& first = choices_.front();
  if (obs_.log_request || status >= 500) {
    std::vector<LogField> f = {Field("request_id", id_),
                               Field("trace_id", obs_.trace.trace_id),
                               Field("endpoint", obs_.endpoint),
                               Field("status", static_cast<int64_t>(status)),
                               Field("prompt_tokens", totals.prompt),
                               Field("completion_tokens", totals.completion),
                               Field("cached_tokens", totals.cached),
                               Field("n", static_cast<int64_t>(choices_.size())),
                               Field("queue_ms", first.queue_s * 1e3),
                               Field("ttft_ms", first.has_first ? ms(arrival_, first.t_first) : 0.0),
                               Field("e2e_ms", ms(arrival_, now)),
                               Field("finish_reason", first.finish_reason != nullptr ? first.finish_reason : ""),
                               Field("stream", spec_.stream)};
    if (!spec_.user.empty()) f.push_back(Field("user", spec_.user));
    if (obs_.log_prompts) {
      std::string prompt, output;
      for (const auto& t : spec_.prompt_texts) prompt += t;
      for (const Choice& c : choices_) output += spec_.stream ? c.log_text : c.text;
      f.push_back(Field("prompt", prompt));
      f.push_back(Field("output", output));
    }
    if (!error_.empty()) f.push_back(Field("error", error_));
    LogEvent(status >= 500 ? LogLevel::kError : LogLevel::kInfo, "request finished", f);
  }
  if (obs_.exporter == nullptr || !obs_.trace.sampled) return;
  Span root;
  root.trace_id = obs_.trace.trace_id;
  root.span_id = obs_.trace.span_id;
  root.parent_span_id = obs_.trace.parent_span_id;
  root.name = "POST " + obs_.endpoint;
  root.server = true;
  root.start_unix_ns = wall(arrival_);
  root.end_unix_ns = wall(now);
  root.string_attrs = {{"infera.request_id", id_}, {"http.route", obs_.endpoint}};
  root.int_attrs = {{"http.response.status_code", status}, {"gen_ai.usage.input_tokens", totals.prompt},
                    {"gen_ai.usage.output_tokens", totals.completion}};
  root.error = status >= 500;
  obs_.exporter->Export(std::move(root));
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const auto queued_until = submitted_ + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(c.queue_s));
    auto child = [&](const char* name, Clock::time_point a, Clock::time_point b) {
      Span s;
      s.trace_id = obs_.trace.trace_id;
      s.span_id = RandomHex(8);
      s.parent_span_id = obs_.trace.span_id;
      s.name = name;
      s.start_unix_ns = wall(a);
      s.end_unix_ns = wall(std::max(a, b));
      s.int_attrs = {{"infera.choice", static_cast<int64_t>(i)}};
      obs_.exporter->Export(std::move(s));
    };
    child("queue", submitted_, queued_until);
    if (c.has_first) {
      child("prefill", queued_until, c.t_first);
      child("decode", c.t_first, c.t_done);
    }
  }
}

void CompletionJob::Finish() {
  const int error_status = unavailable_ ? 503 : not_found_ ? 404 : 500;
  Report(error_.empty() ? 200 : error_status);
  if (responses_) return ResponsesFinish();
  if (!error_.empty()) {
    ApiError err;
    err.status = error_status;
    err.type = unavailable_ ? "service_unavailable" : not_found_ ? "invalid_request_error" : "server_error";
    if (not_found_) err.code = "model_not_found";
    err.message = error_;
    if (spec_.stream && spec_.anthropic) {
      resp_->Send("event: error\ndata: " + AnthropicErrorBody(error_status, err.ToJson()) + "\n\n");
      resp_->End();
    } else if (spec_.stream) {
      resp_->Send("data: " + err.ToJson() + "\n\n");
      resp_->Send("data: [DONE]\n\n");
      resp_->End();
    } else {
      resp_->Respond(error_status, "application/json", err.ToJson());
    }
    return;
  }
  if (spec_.stream && (spec_.native || spec_.anthropic)) {  // ended by their final objects / events, no [DONE]
    resp_->End();
    return;
  }
  if (spec_.anthropic) {
    resp_->Respond(200, "application/json", DumpJson(AnthropicMessage(choices_[0], 0)));
    return;
  }
  if (spec_.native) {  // one object; for several prompts an array of them
    json results = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) results.push_back(NativeResult(i, choices_[i].text));
    resp_->Respond(200, "application/json", DumpJson(results.size() == 1 ? results[0] : results));
    return;
  }
  if (spec_.stream) {
    if (spec_.include_usage) {
      SendEvent({{"id", id_},
                 {"object", spec_.chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", created_},
                 {"model", model_},
                 {"choices", json::array()},
                 {"usage", Usage()}});
    }
    resp_->Send("data: [DONE]\n\n");
    resp_->End();
    return;
  }
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    json lp = nullptr;
    if (EchoLogprobs()) {
      std::vector<TokenLogprob> all = c.prompt_logprobs;
      all.insert(all.end(), c.logprobs.begin(), c.logprobs.end());
      lp = LogprobsJson(c, all, true);
    } else if (spec_.logprobs) {
      lp = LogprobsJson(c, c.logprobs);
    }
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", c.finish_reason}, {"stop_reason", StopReason(c)}};
    if (spec_.prompt_logprobs >= 0 && !spec_.chat) choice["prompt_logprobs"] = PromptLogprobsJson(c);
    if (spec_.chat && spec_.parse_tool_calls) {
      ParsedReply r = ReplyWithTools(c, i);
      json message = {{"role", "assistant"}, {"content", r.content}, {"refusal", nullptr}};
      if (!r.calls.empty()) {
        if (r.content.empty()) message["content"] = nullptr;
        json calls = json::array();
        for (const ToolCall& t : r.calls) calls.push_back(ToolCallJson(t));
        message["tool_calls"] = std::move(calls);
        if (c.finish_reason != nullptr && std::string(c.finish_reason) == "stop") {
          choice["finish_reason"] = "tool_calls";
          choice["stop_reason"] = nullptr;
        }
      }
      choice["message"] = std::move(message);
    } else if (spec_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    } else {
      choice["text"] = spec_.echo ? spec_.prompt_texts[c.prompt_index] + c.text : c.text;
    }
    choices.push_back(std::move(choice));
  }
  json body = {{"id", id_},           {"object", spec_.chat ? "chat.completion" : "text_completion"},
               {"created", created_}, {"model", model_},
               {"choices", choices},  {"usage", Usage()}};
  // (vLLM: a chat's one prompt, on the response.)
  if (spec_.prompt_logprobs >= 0 && spec_.chat) body["prompt_logprobs"] = PromptLogprobsJson(choices_.front());
  resp_->Respond(200, "application/json", DumpJson(body));
}

}  // namespace infera::server
