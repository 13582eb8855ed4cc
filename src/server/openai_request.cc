#include "server/openai_request.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "base/json.h"
#include "sampling/grammar.h"
#include "server/field_reader.h"
#include "server/output_constraints.h"
#include "server/request_fields.h"

namespace infera::server {

bool ValidSessionId(const std::string& id) {
  if (id.empty()) return true;
  if (id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.' || c == ':' || c == '@';
    if (!ok) return false;
  }
  return true;
}

using nlohmann::json;

std::string ApiError::ToJson() const {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  // (A message may quote the request's bytes, which need not be UTF-8.)
  return DumpJson(json{{"error", e}});
}

ApiError BadValue(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = "invalid_value";
  return e;
}

bool SetBadValue(ApiError* err, std::string param, std::string message) {
  *err = BadValue(std::move(param), std::move(message));
  return false;
}

namespace {

constexpr int32_t kMaxLogprobs = 20;
constexpr int32_t kMaxNativeProbs = 1000;  // llama-server's n_probs (the engine's limit)
constexpr size_t kMaxStops = 16;

bool KindMatches(const json& v, JsonKind kind) {
  switch (kind) {
    case JsonKind::kString: return v.is_string();
    case JsonKind::kBool: return v.is_boolean();
    case JsonKind::kNumber: return v.is_number();
    case JsonKind::kInteger: return v.is_number_integer();
    case JsonKind::kObject: return v.is_object();
    case JsonKind::kArray: return v.is_array();
  }
  return false;
}

const char* KindName(JsonKind kind) {
  switch (kind) {
    case JsonKind::kString: return "a string";
    case JsonKind::kBool: return "a boolean";
    case JsonKind::kNumber: return "a number";
    case JsonKind::kInteger: return "an integer";
    case JsonKind::kObject: return "an object";
    case JsonKind::kArray: return "a list";
  }
  return "";
}

// Refuses fields that are not implemented (unless they hold their no-op
// value) and no-effect fields of the wrong type; with `refuse_unknown`, also
// fields no API defines. Fields infera parses are left to the parser.
bool CheckFields(const json& body, bool chat, bool refuse_unknown, FieldReader* r) {
  for (const auto& [key, value] : body.items()) {
    const RequestField* f = FindRequestField(key, chat);
    if (f == nullptr) {
      if (!refuse_unknown) continue;
      const RequestField* other = FindRequestField(key, !chat);
      return r->Fail(key, other != nullptr
                              ? fmt::format("'{}' belongs to the {} endpoint", key,
                                            chat ? "/v1/completions" : "/v1/chat/completions")
                              : fmt::format("Unrecognized request argument supplied: {}", key));
    }
    if (value.is_null()) continue;
    if (f->use == FieldUse::kNoEffect && !KindMatches(value, f->kind)) {
      return r->Fail(key, fmt::format("'{}' must be {}", key, KindName(f->kind)));
    }
    if (f->use == FieldUse::kRefused && !IsNoopValue(*f, value)) {
      return r->Fail(key, fmt::format("'{}' ({}) is not supported yet; the request is refused rather than "
                                      "answered without it (accepted: {})",
                                      key, f->what, NoopDescription(*f)));
    }
  }
  return true;
}

bool TokenList(const json& arr, int32_t n_vocab, std::vector<int32_t>* out, FieldReader* r) {
  for (const json& t : arr) {
    if (!t.is_number_integer()) return r->Fail("prompt", "token prompts must be lists of integers");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      return r->Fail("prompt", fmt::format("token id {} is out of range [0, {})", id, n_vocab));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return true;
}

bool ParsePrompt(const ParseContext& ctx, CompletionSpec* out, FieldReader* r) {
  const json* p = r->Find("prompt");
  if (p == nullptr) return r->Fail("prompt", "'prompt' is required");
  const Tokenizer& tok = *ctx.tokenizer;
  bool add_special = true;  // vLLM's add_special_tokens: BOS (as the model's vocabulary says)
  r->Bool("add_special_tokens", &add_special);
  if (!r->ok()) return false;
  auto add_text = [&](const std::string& text) {
    out->prompts.push_back(tok.Encode(text, add_special, /*parse_special=*/true));
    out->prompt_texts.push_back(text);
  };
  auto add_ids = [&](const json& arr) {
    std::vector<int32_t> ids;
    if (!TokenList(arr, ctx.limits.n_vocab, &ids, r)) return false;
    out->prompt_texts.push_back(tok.Decode(ids, true));
    out->prompts.push_back(std::move(ids));
    return true;
  };
  if (p->is_string()) {
    add_text(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) return r->Fail("prompt", "'prompt' must not be an empty list");
    if ((*p)[0].is_number_integer()) {
      if (!add_ids(*p)) return false;
    } else {
      for (const json& item : *p) {
        if (item.is_string()) {
          add_text(item.get<std::string>());
        } else if (item.is_array()) {
          if (!add_ids(item)) return false;
        } else {
          return r->Fail("prompt", "'prompt' must be a string, a list of strings, or token ids");
        }
      }
    }
  } else {
    return r->Fail("prompt", "'prompt' must be a string, a list of strings, or token ids");
  }
  return true;
}

bool ParseStop(CompletionSpec* out, FieldReader* r) {
  const json* s = r->Find("stop");
  if (s == nullptr) return true;
  auto add = [&](const json& v) {
    if (!v.is_string()) return r->Fail("stop", "'stop' must be a string or a list of strings");
    if (!v.get<std::string>().empty()) out->params.stop.push_back(v.get<std::string>());
    return true;
  };
  if (s->is_array()) {
    if (s->size() > kMaxStops) return r->Fail("stop", fmt::format("at most {} stop sequences", kMaxStops));
    for (const json& v : *s) {
      if (!add(v)) return false;
    }
    return true;
  }
  return add(*s);
}

// vLLM's stop_token_ids: a list of token ids.
bool ParseStopTokenIds(const ParseContext& ctx, CompletionSpec* out, FieldReader* r) {
  const json* s = r->Find("stop_token_ids");
  if (s == nullptr) return true;
  if (!s->is_array() || s->size() > 64)
    return r->Fail("stop_token_ids", "'stop_token_ids' must be a list of at most 64 token ids");
  for (const json& v : *s) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= ctx.limits.n_vocab) {
      return r->Fail("stop_token_ids", fmt::format("stop_token_ids must be token ids in [0, {})", ctx.limits.n_vocab));
    }
    out->params.stop_token_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return true;
}

// llama-server's per-request LoRA scales: [{"id", "scale"}]; adapters not
// named are off for this request.
bool ParseLora(const ParseContext& ctx, CompletionSpec* out, FieldReader* r) {
  const json* l = r->Find("lora");
  if (l == nullptr) return true;
  if (!l->is_array()) return r->Fail("lora", "'lora' must be a list of {\"id\": adapter index, \"scale\": number}");
  const int32_t n = ctx.limits.n_lora;
  if (n == 0 && !l->empty()) return r->Fail("lora", "this server has no LoRA adapters (serve --lora FILE)");
  out->lora_given = true;
  out->params.lora_scales.assign(static_cast<size_t>(n), 0.0f);
  for (const json& e : *l) {
    const json* id = e.is_object() && e.contains("id") ? &e["id"] : nullptr;
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= n) {
      return r->Fail("lora", fmt::format("each 'lora' entry needs an 'id' in [0, {}) (GET /lora-adapters)", n));
    }
    const json scale = e.value("scale", json(1.0));
    if (!scale.is_number() || !std::isfinite(scale.get<double>()) || std::fabs(scale.get<double>()) > 1000) {
      return r->Fail("lora", "a 'lora' entry's 'scale' must be a number in [-1000, 1000]");
    }
    out->params.lora_scales[static_cast<size_t>(id->get<int64_t>())] = scale.get<float>();
  }
  return true;
}

bool ParseLogitBias(const ParseContext& ctx, CompletionSpec* out, FieldReader* r) {
  const json* b = r->Find("logit_bias");
  if (b == nullptr) return true;
  if (!b->is_object()) return r->Fail("logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (const auto& [key, value] : b->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= ctx.limits.n_vocab) {
      return r->Fail("logit_bias", fmt::format("logit_bias key '{}' is not a token id in [0, {})", key,
                                               ctx.limits.n_vocab));
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100) {
      return r->Fail("logit_bias", "logit_bias values must be numbers in [-100, 100]");
    }
    out->params.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return true;
}

}  // namespace

bool CheckUnsupportedFields(const json& body, bool chat, ApiError* err) {
  FieldReader r(body, err);
  return CheckFields(body, chat, /*refuse_unknown=*/false, &r);
}

bool IsUnsupportedField(const std::string& name) {
  for (bool chat : {false, true}) {
    const RequestField* f = FindRequestField(name, chat);
    if (f != nullptr && f->use != FieldUse::kParsed) return true;
  }
  return false;
}

namespace {

// A parsed body (either JSON type) that must be an object.
template <typename Json>
bool CheckJsonBody(const Json& out, ApiError* err) {
  if (out.is_discarded()) {
    err->status = 400;
    err->message = "the request body is not valid JSON";
    err->code = "invalid_json";
    return false;
  }
  if (!out.is_object()) {
    err->status = 400;
    err->message = "the request body must be a JSON object";
    err->code = "invalid_json";
    return false;
  }
  return true;
}

}  // namespace

bool ParseJsonBody(const std::string& body, json* out, ApiError* err) {
  *out = ParseJson(body);
  return CheckJsonBody(*out, err);
}

bool ParseJsonBody(const std::string& body, nlohmann::ordered_json* out, ApiError* err) {
  *out = ParseOrderedJson(body);
  return CheckJsonBody(*out, err);
}

bool ParseCompletionRequest(const std::string& body_text, bool chat, const ParseContext& ctx, CompletionSpec* out,
                            ApiError* err) {
  json body;
  if (!ParseJsonBody(body_text, &body, err)) return false;
  FieldReader r(body, err);
  *out = CompletionSpec{};
  out->chat = chat;
  r.String("model", &out->model);
  r.String("user", &out->user);
  if (out->user.empty()) r.String("safety_identifier", &out->user);
  RequestParams& p = out->params;
  // OpenAI's defaults: temperature 1, nucleus off; the other filters off.
  SamplingParams& s = p.sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  s.penalty_last_n = -1;
  r.Number("temperature", &s.temperature, 0, 100);
  r.Number("top_p", &s.top_p, 0, 1);
  if (r.ok() && s.top_p <= 0) r.Fail("top_p", "'top_p' must be in (0, 1]");
  r.Number("min_p", &s.min_p, 0, 1);
  r.Number("presence_penalty", &s.presence_penalty, -2, 2);
  r.Number("frequency_penalty", &s.frequency_penalty, -2, 2);
  r.Number("repetition_penalty", &s.repetition_penalty, 0, 100);
  if (r.ok() && s.repetition_penalty <= 0) r.Fail("repetition_penalty", "'repetition_penalty' must be > 0");
  int64_t top_k = 0;
  if (r.Integer("top_k", &top_k, -1, std::numeric_limits<int32_t>::max())) s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  int64_t seed = 0;
  if (r.Integer("seed", &seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(seed);
    s.has_seed = true;
  }
  const int32_t kMaxInt = std::numeric_limits<int32_t>::max();
  if (!CheckFields(body, chat, /*refuse_unknown=*/true, &r)) return false;
  // Completions: max_tokens 0 with echo scores the prompt (OpenAI's legacy use).
  r.Integer(chat ? "max_completion_tokens" : "max_tokens", &p.max_tokens, chat ? 1 : 0, kMaxInt);
  if (chat && p.max_tokens < 0) r.Integer("max_tokens", &p.max_tokens, 1, kMaxInt);
  // llama.cpp's name for max_tokens (-1: no limit).
  int32_t n_predict = -1;
  if (p.max_tokens < 0 && r.Integer("n_predict", &n_predict, -1, kMaxInt)) {
    if (n_predict == 0) r.Fail("n_predict", "'n_predict' must be -1 (no limit) or at least 1");
    p.max_tokens = n_predict;
  }
  // llama.cpp's names for the repetition penalty and its window.
  if (r.Find("repetition_penalty") == nullptr && r.Find("repeat_penalty") != nullptr) {
    r.Number("repeat_penalty", &s.repetition_penalty, 0, 100);
    if (r.ok() && s.repetition_penalty <= 0) r.Fail("repeat_penalty", "'repeat_penalty' must be > 0");
    s.penalty_last_n = 64;
  }
  r.Integer("repeat_last_n", &s.penalty_last_n, -1, kMaxInt);
  r.Integer("min_tokens", &p.min_tokens, 0, kMaxInt);
  r.Integer("priority", &p.priority, std::numeric_limits<int32_t>::min(), kMaxInt);
  r.String("session_id", &p.session_id);
  if (r.ok() && !ValidSessionId(p.session_id)) {
    r.Fail("session_id", "'session_id' must be 1-128 characters of letters, digits, '-', '_', '.', ':' or '@'");
  }
  r.Bool("ignore_eos", &p.ignore_eos);
  r.Bool("include_stop_str_in_output", &p.include_stop_str_in_output);
  r.Bool("skip_special_tokens", &p.skip_special_tokens);
  r.Integer("n", &out->n, 1, ctx.limits.max_n);
  // best_of > n would pick the n best of best_of samples: not implemented.
  // best_of == n is what every request does anyway.
  if (const json* best_of = r.Find("best_of"); best_of != nullptr && r.ok()) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != out->n) {
      r.Fail("best_of", "'best_of' other than n (choosing the best of several samples) is not supported yet");
    }
  }
  r.Bool("stream", &out->stream);
  if (const json* so = r.Find("stream_options"); so != nullptr && r.ok()) {
    if (!so->is_object()) {
      r.Fail("stream_options", "'stream_options' must be an object");
    } else if (!out->stream) {
      r.Fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    } else {
      FieldReader sr(*so, err);
      sr.Bool("include_usage", &out->include_usage);
      if (!sr.ok()) return false;
      for (const auto& [key, value] : so->items()) {
        // OpenAI's include_obfuscation pads chunks against side channels; off is a no-op.
        const bool noop = key == "include_obfuscation" && (value.is_null() || value == false);
        if (key != "include_usage" && !noop) {
          return r.Fail("stream_options", fmt::format("'stream_options.{}' is not supported (include_usage only)", key));
        }
      }
    }
  }
  if (chat) {
    bool want = false;
    r.Bool("logprobs", &want);
    int32_t top = 0;
    const bool has_top = r.Integer("top_logprobs", &top, 0, kMaxLogprobs);
    if (has_top && !want && r.ok()) r.Fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    if (want) {
      out->logprobs = true;
      p.logprobs = top;
    }
  } else {
    int32_t top = -1;
    if (r.Integer("logprobs", &top, 0, kMaxLogprobs)) {
      if (ctx.native && r.ok()) {
        return r.Fail("logprobs", "/completion takes n_probs for token probabilities; 'logprobs' is /v1/completions'");
      }
      out->logprobs = true;
      p.logprobs = top;
    }
    r.Bool("echo", &out->echo);
  }
  r.Bool("return_tokens", &out->return_tokens);
  if (out->return_tokens && !ctx.native && r.ok()) {
    return r.Fail("return_tokens", "'return_tokens' is llama-server's /completion field; here only false is accepted");
  }
  // llama.cpp's n_probs: on /completion its completion_probabilities; on the
  // OpenAI endpoints (as llama-server takes it there) the top-k of logprobs
  // when the request does not ask for those itself.
  int32_t n_probs = 0;
  if (r.Integer("n_probs", &n_probs, 0, ctx.native ? kMaxNativeProbs : kMaxLogprobs) && n_probs > 0 && !out->logprobs) {
    out->logprobs = true;
    p.logprobs = n_probs;
  }
  r.Bool("post_sampling_probs", &p.logprobs_processed);
  // OpenAI's suffix reaches here only where nothing made it a FIM prompt
  // (the server does, for models with FIM tokens: ApiServer::TakeSuffixPrompt).
  std::string suffix;
  r.String("suffix", &suffix);
  if (!suffix.empty() && r.ok()) {
    return r.Fail("suffix",
                  "'suffix' (fill-in-the-middle) is only served, by /v1/completions, for models with FIM tokens");
  }
  if (r.Integer("prompt_logprobs", &out->prompt_logprobs, 0, kMaxLogprobs) && r.ok()) {
    if (out->stream) return r.Fail("prompt_logprobs", "'prompt_logprobs' is not available when 'stream' is true");
    if (ctx.native) return r.Fail("prompt_logprobs", "'prompt_logprobs' is vLLM's, on /v1/completions");
  }
  out->native = ctx.native;
  // The body with its key order: JSON schemas and tools keep their properties' order.
  nlohmann::ordered_json obody = ParseOrderedJson(body_text);
  if (r.ok() && !ParseOutputConstraint(obody, &p.grammar, err)) return false;
  ToolRequest treq;
  if (chat && r.ok()) {
    if (Status st = ParseToolRequest(obody, &treq); !st.ok()) {
      const std::string m(st.message());
      const size_t colon = m.find(": ");
      return r.Fail(m.substr(0, colon), m.substr(colon + 2));
    }
  }
  if (!ParseStop(out, &r) || !ParseStopTokenIds(ctx, out, &r) || !ParseLogitBias(ctx, out, &r) ||
      !ParseLora(ctx, out, &r))
    return false;
  if (!r.ok()) return false;
  if (chat ? !ParseMessages(obody, treq, ctx, out, &r) : !ParsePrompt(ctx, out, &r)) return false;
  if (!chat && p.max_tokens == 0 && !out->echo) {
    return r.Fail("max_tokens", "'max_tokens' must be at least 1 (0 only with 'echo', to score the prompt)");
  }
  // echo with logprobs: the prompt tokens' log-probabilities come first (the
  // first token's is null), as OpenAI's legacy completions return them.
  if (out->echo && (out->logprobs || p.max_tokens == 0)) p.prompt_logprobs = out->logprobs ? p.logprobs : 0;
  // (vLLM's prompt_logprobs too: the engine computes the larger top-k, each
  // answer lists its own.)
  p.prompt_logprobs = std::max(p.prompt_logprobs, out->prompt_logprobs);
  if (out->prompts.size() * static_cast<size_t>(out->n) > static_cast<size_t>(ctx.limits.max_n) * 16) {
    return r.Fail("prompt", "too many prompts in one request");
  }
  const int32_t ctx_len = ctx.limits.max_model_len;
  for (const auto& ids : out->prompts) {
    const int64_t len = static_cast<int64_t>(ids.size());
    if (len == 0) return r.Fail(chat ? "messages" : "prompt", "the prompt is empty");
    const bool over_prompt = len > ctx_len || (len == ctx_len && p.max_tokens != 0);
    const bool over_total = !ctx.limits.context_shift && p.max_tokens > 0 && len + p.max_tokens > ctx_len;
    if (over_prompt || over_total) {
      r.Fail(chat ? "messages" : "prompt",
             fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                         "the {}, {} in the completion). Please reduce the length of the {} or completion.",
                         ctx_len, len + std::max(0, p.max_tokens), len, chat ? "messages" : "prompt",
                         std::max(0, p.max_tokens), chat ? "messages" : "prompt"));
      err->code = "context_length_exceeded";
      return false;
    }
  }
  return true;
}

}  // namespace infera::server
