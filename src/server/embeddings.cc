#include "server/embeddings.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "server/completion_job.h"

namespace infera::server {

using nlohmann::json;

namespace {

// One input: a string, or a list of token ids.
bool AddInput(const json& v, const Tokenizer& tok, const EmbeddingLimits& limits, bool add_special,
              EmbeddingSpec* out, ApiError* err) {
  std::vector<int32_t> ids;
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) return SetBadValue(err, "input", "an input must not be an empty string");
    ids = tok.Encode(v.get<std::string>(), add_special, /*parse_special=*/false);
  } else if (v.is_array()) {
    if (v.empty()) return SetBadValue(err, "input", "an input must not be an empty list of token ids");
    for (const json& t : v) {
      if (!t.is_number_integer()) return SetBadValue(err, "input", "'input' must be a string, a list of strings or token ids");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= limits.n_vocab) {
        return SetBadValue(err, "input", fmt::format("token id {} is out of range [0, {})", id, limits.n_vocab));
      }
      ids.push_back(static_cast<int32_t>(id));
    }
  } else {
    return SetBadValue(err, "input", "'input' must be a string, a list of strings, token ids, or lists of token ids");
  }
  if (ids.empty()) return SetBadValue(err, "input", "an input has no tokens");
  if (static_cast<int64_t>(ids.size()) > limits.max_model_len) {
    SetBadValue(err, "input",
        fmt::format("This model's maximum context length is {} tokens, however you requested {} tokens in input {}. "
                    "Please reduce your input.",
                    limits.max_model_len, ids.size(), out->inputs.size()));
    err->code = "context_length_exceeded";
    return false;
  }
  out->inputs.push_back(std::move(ids));
  return true;
}

}  // namespace

bool ParseEmbeddingRequest(const std::string& body_text, const Tokenizer& tok, const EmbeddingLimits& limits,
                           EmbeddingSpec* out, ApiError* err) {
  json body;
  if (!ParseJsonBody(body_text, &body, err)) return false;
  *out = EmbeddingSpec{};
  bool add_special = true;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "input" || key == "content") {  // content: llama.cpp's name
      continue;
    } else if (key == "model" || key == "user") {
      if (!v.is_string()) return SetBadValue(err, key, fmt::format("'{}' must be a string", key));
      (key == "model" ? out->model : out->user) = v.get<std::string>();
    } else if (key == "encoding_format") {
      if (v != "float" && v != "base64") return SetBadValue(err, key, "'encoding_format' must be \"float\" or \"base64\"");
      out->base64 = v == "base64";
    } else if (key == "dimensions") {
      // OpenAI's dimensions shortens Matryoshka-trained embeddings; this
      // model's are whole only.
      if (!v.is_number_integer() || v.get<int64_t>() != limits.n_embd) {
        return SetBadValue(err, key, fmt::format("'dimensions' must be this model's embedding size, {}", limits.n_embd));
      }
    } else if (key == "normalize") {  // vLLM
      if (!v.is_boolean()) return SetBadValue(err, key, "'normalize' must be a boolean");
      out->embd_normalize = v.get<bool>() ? 2 : -1;
    } else if (key == "embd_normalize") {  // llama.cpp
      if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > 64) {
        return SetBadValue(err, key,
                           "'embd_normalize' must be -1 (none), 0 (max absolute, int16 range), 1 (taxicab), 2 "
                           "(Euclidean) or a p-norm's p up to 64");
      }
      out->embd_normalize = static_cast<int32_t>(v.get<int64_t>());
    } else if (key == "add_special_tokens") {  // vLLM
      if (!v.is_boolean()) return SetBadValue(err, key, "'add_special_tokens' must be a boolean");
      add_special = v.get<bool>();
    } else if (key == "priority") {  // vLLM
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        return SetBadValue(err, key, "'priority' must be an integer");
      }
      out->priority = static_cast<int32_t>(v.get<int64_t>());
    } else if (key == "truncate_prompt_tokens") {  // vLLM
      return SetBadValue(err, key, "'truncate_prompt_tokens' (prompt truncation) is not supported yet; the request is "
                           "refused rather than answered without it");
    } else {
      return SetBadValue(err, key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  const json* input = nullptr;
  if (auto it = body.find("input"); it != body.end() && !it->is_null()) input = &*it;
  if (input == nullptr) {
    if (auto it = body.find("content"); it != body.end() && !it->is_null()) input = &*it;
  }
  if (input == nullptr) return SetBadValue(err, "input", "'input' is required");
  if (input->is_array() && !input->empty() && !(*input)[0].is_number_integer()) {
    if (input->size() > limits.max_inputs) {
      return SetBadValue(err, "input", fmt::format("at most {} inputs per request", limits.max_inputs));
    }
    for (const json& item : *input) {
      if (!item.is_string() && !item.is_array()) {
        return SetBadValue(err, "input", "'input' must be a string, a list of strings, token ids, or lists of token ids");
      }
      if (!AddInput(item, tok, limits, add_special, out, err)) return false;
    }
    return true;
  }
  return AddInput(*input, tok, limits, add_special, out, err);
}

void NormalizeEmbedding(int32_t norm, std::vector<float>* v) {
  double scale = 1.0;  // what the vector is divided by
  if (norm == 0) {
    double max_abs = 0;
    for (float x : *v) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
    scale = max_abs / 32760.0;
  } else if (norm > 0) {
    double sum = 0;
    for (float x : *v) sum += std::pow(std::fabs(static_cast<double>(x)), norm);
    scale = std::pow(sum, 1.0 / norm);
  }
  const double inv = scale > 0 ? 1.0 / scale : 0.0;
  for (float& x : *v) x = static_cast<float>(x * inv);
}

std::string Base64Floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(u >> (8 * b));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t{bytes[i]} << 16) | (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

const char* PoolingName(Pooling p) {
  switch (p) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
  }
  return "?";
}

bool ParsePooling(const std::string& name, Pooling* out) {
  for (Pooling p : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    if (name == PoolingName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

EmbeddingJob::EmbeddingJob(EmbeddingSpec spec, Pooling pooling, std::shared_ptr<Responder> resp, AsyncEngine* engine,
                           std::string model_name)
    : spec_(std::move(spec)),
      pooling_(pooling),
      resp_(std::move(resp)),
      engine_(engine),
      model_name_(std::move(model_name)) {}

void EmbeddingJob::Start() {
  std::lock_guard<std::mutex> lock(mu_);  // outputs wait until every input is in
  embeddings_.resize(spec_.inputs.size());
  remaining_ = spec_.inputs.size();
  RequestParams params;
  params.max_tokens = 0;
  params.pooling = pooling_;
  // The engine's own L2 normalization; the other norms are applied here.
  params.normalize_embedding = spec_.embd_normalize == 2;
  params.priority = spec_.priority;
  params.lora_scales = spec_.lora_scales;
  params.lora_adapter = spec_.lora_adapter;
  auto self = shared_from_this();
  for (size_t i = 0; i < spec_.inputs.size(); ++i) {
    auto id = engine_->Submit(spec_.inputs[i], params, [self, i](const RequestOutput& o) { self->OnOutput(i, o); });
    if (!id.ok()) {
      const StatusCode c = id.status().code();
      if (c == StatusCode::kUnavailable) return Fail(503, "service_unavailable", "shutting_down", id.status().message());
      if (c == StatusCode::kResourceExhausted) {
        return Fail(400, "invalid_request_error", "kv_cache_capacity_exceeded", id.status().message());
      }
      if (c == StatusCode::kUnimplemented) return Fail(501, "invalid_request_error", "not_implemented", id.status().message());
      return Fail(400, "invalid_request_error", "invalid_value", id.status().message());
    }
    ids_.push_back(*id);
  }
}

void EmbeddingJob::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  answered_ = true;  // nobody to answer
  for (uint64_t id : ids_) engine_->Cancel(id);
}

void EmbeddingJob::Fail(int status, const std::string& type, const std::string& code, const std::string& message) {
  if (answered_) return;
  answered_ = true;
  for (uint64_t id : ids_) engine_->Cancel(id);
  ApiError err;
  err.status = status;
  err.type = type;
  err.code = code;
  err.message = message;
  resp_->Respond(err.status, "application/json", err.ToJson());
}

void EmbeddingJob::OnOutput(size_t index, const RequestOutput& o) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!o.finished) return;
  if (o.finish_reason == FinishReason::kError) {
    if (o.error_code == StatusCode::kNotFound) {  // (a LoRA adapter unloaded since the request came)
      return Fail(404, "invalid_request_error", "model_not_found", o.error);
    }
    const bool unavailable = o.error_code == StatusCode::kUnavailable;
    return Fail(unavailable ? 503 : 500, unavailable ? "service_unavailable" : "server_error",
                unavailable ? "unavailable" : "internal_error", o.error);
  }
  if (o.finish_reason == FinishReason::kCancelled || o.embedding.empty()) {
    return Fail(503, "service_unavailable", "cancelled", "the request was cancelled (the server is shutting down)");
  }
  embeddings_[index] = o.embedding;
  if (spec_.embd_normalize != 2 && spec_.embd_normalize != -1)
    NormalizeEmbedding(spec_.embd_normalize, &embeddings_[index]);
  prompt_tokens_ += o.prompt_tokens;
  if (--remaining_ > 0 || answered_) return;
  answered_ = true;
  if (spec_.native) {  // llama-server: [{"index", "embedding": [the pooled vector]}]
    json list = json::array();
    for (size_t i = 0; i < embeddings_.size(); ++i) {
      list.push_back({{"index", i}, {"embedding", json::array({embeddings_[i]})}});
    }
    resp_->Respond(200, "application/json", DumpJson(list));
    return;
  }
  json data = json::array();
  for (size_t i = 0; i < embeddings_.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (spec_.base64) {
      e["embedding"] = Base64Floats(embeddings_[i]);
    } else {
      e["embedding"] = embeddings_[i];
    }
    data.push_back(std::move(e));
  }
  const json body = {{"object", "list"},
                     {"data", std::move(data)},
                     {"model", model_name_},
                     {"usage", {{"prompt_tokens", prompt_tokens_}, {"total_tokens", prompt_tokens_}}}};
  resp_->Respond(200, "application/json", DumpJson(body));
}

}  // namespace infera::server
