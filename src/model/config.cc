#include "model/config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/json.h"
#include "model/arch/registry.h"
#include "model/tensor_schema.h"

namespace infera {

const char* ArchName(Arch a) { return GetArch(a).name; }

float LongRopeDefaultMscale(float factor, int original_ctx) {
  if (factor <= 1.0f || original_ctx <= 1) return 1.0f;
  return std::sqrt(1.0f + std::log(factor) / std::log(static_cast<float>(original_ctx)));
}

std::vector<int> ModelConfig::KvHeadsPerLayer() const {
  std::vector<int> h(n_layer);
  for (int l = 0; l < n_layer; ++l) h[l] = n_head_kv_at(l);
  return h;
}

LayerConfig ModelConfig::Layer(int layer) const {
  LayerConfig lc;
  lc.n_head = n_head_at(layer);
  lc.n_head_kv = n_head_kv_at(layer);
  lc.n_ff = n_ff_at(layer);
  const bool sliding = LayerIsSliding(layer);
  lc.sliding_window = sliding ? sliding_window : 0;
  // gemma3: local layers use their own base and no scaling.
  const bool local_rope = sliding && rope_theta_swa > 0;
  lc.rope_theta = local_rope ? rope_theta_swa : rope_theta;
  if (!local_rope && rope_scaling.type == RopeScaling::Type::kLinear) lc.rope_linear_factor = rope_scaling.factor;
  return lc;
}


Status ModelConfig::Validate(const std::string& source) const {
  auto bad = [&](const std::string& what) { return DataLoss(source + ": invalid model config: " + what); };
  if (n_vocab <= 0 || n_vocab > (1 << 24)) return bad(fmt::format("vocab size {} out of range", n_vocab));
  if (n_embd <= 0 || n_embd > (1 << 17)) return bad(fmt::format("embedding length {} out of range", n_embd));
  if (n_layer <= 0 || n_layer > 1024) return bad(fmt::format("block count {} out of range", n_layer));
  if (n_head <= 0 || n_head > 1024) return bad(fmt::format("head count {} out of range", n_head));
  if (n_head_kv <= 0 || n_head % n_head_kv != 0) return bad(fmt::format("kv head count {} must divide head count {}", n_head_kv, n_head));
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024) return bad(fmt::format("head dim {} must be even and <= 1024", head_dim));
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) return bad(fmt::format("rope dimension {} out of range", rope_dim));
  if (n_ff <= 0 || n_ff > (1 << 20)) return bad(fmt::format("feed-forward length {} out of range", n_ff));
  if (n_ctx_train <= 0) return bad("context length must be positive");
  if (!(rms_eps > 0) || !(rms_eps < 1)) return bad("rms epsilon must be in (0, 1)");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) return bad("rope theta must be positive");
  if (sliding_window < 0) return bad("sliding window must be >= 0");
  if (!(rope_scaling.factor > 0) || !std::isfinite(rope_scaling.factor)) return bad("rope scaling factor must be positive");
  if (!(rope_scaling.mscale > 0) || !std::isfinite(rope_scaling.mscale)) return bad("rope attention factor must be positive");
  if (!(rope_scaling.yarn_beta_fast > 0) || !(rope_scaling.yarn_beta_slow > 0)) return bad("yarn betas must be positive");
  for (float m : {embedding_scale, residual_scale, logit_scale}) {
    if (!(m > 0) || !std::isfinite(m)) return bad("embedding, residual and logit scales must be positive");
  }
  if (!(attention_scale >= 0) || !std::isfinite(attention_scale)) return bad("attention scale must be >= 0");
  for (float cap : {attn_softcap, final_softcap}) {
    if (!(cap >= 0) || !std::isfinite(cap)) return bad("soft-capping values must be >= 0");
  }
  if (swa_period < 0 || swa_period > 1024) return bad("sliding window pattern out of range");
  for (const auto* v : {&layer_n_head, &layer_n_head_kv, &layer_n_ff}) {
    if (!v->empty() && static_cast<int>(v->size()) != n_layer) return bad("per-layer widths must have one entry per layer");
  }
  for (int l = 0; l < n_layer; ++l) {
    const int h = n_head_at(l), kv = n_head_kv_at(l), ff = n_ff_at(l);
    if (h <= 0 || h > n_head || kv <= 0 || kv > n_head_kv || h % kv != 0) {
      return bad(fmt::format("layer {}: {} heads and {} KV heads (KV heads must divide heads; 1..{} and 1..{})", l, h,
                             kv, n_head, n_head_kv));
    }
    if (ff <= 0 || ff > n_ff) return bad(fmt::format("layer {}: feed-forward length {} out of range 1..{}", l, ff, n_ff));
  }
  if (n_expert < 0 || n_expert > 1024) return bad(fmt::format("expert count {} out of range", n_expert));
  if (n_expert > 0) {
    if (n_expert_used < 1 || n_expert_used > n_expert) {
      return bad(fmt::format("experts used per token {} must be in 1..{}", n_expert_used, n_expert));
    }
    if (n_ff_exp <= 0 || n_ff_exp > (1 << 20)) return bad(fmt::format("expert FFN length {} out of range", n_ff_exp));
    if (n_ff_shexp < 0 || n_ff_shexp > (1 << 20)) return bad("shared expert FFN length out of range");
  }
  if (!(rope_theta_swa >= 0) || !std::isfinite(rope_theta_swa)) return bad("sliding-layer rope base must be >= 0");
  return Status::Ok();
}

StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& f) {
  ModelConfig c;
  if (f.GetString("general.type").value_or("") == "adapter") {
    return InvalidArgument(f.name() + " is a " + f.GetString("adapter.type").value_or("model") +
                           " adapter, not a model: give the model with -m and this file with --lora");
  }
  auto arch = f.GetString("general.architecture");
  if (!arch) return DataLoss(f.name() + ": missing required key general.architecture");
  const ArchInfo* info = FindArchByGguf(*arch);
  if (info == nullptr) {
    return Unimplemented(f.name() + ": unsupported architecture '" + *arch + "' (supported: " + SupportedArchNames() +
                         ")");
  }
  ApplyArchShape(*info, &c);
  const std::string a = *arch + ".";
  c.name = f.GetString("general.name").value_or(*arch);
  auto req = [&](const std::string& key, int* out) -> Status {
    auto v = f.GetInt(key);
    if (!v) return DataLoss(f.name() + ": missing required key " + key);
    if (*v <= 0 || *v > (int64_t{1} << 30)) return DataLoss(fmt::format("{}: {} = {} out of range", f.name(), key, *v));
    *out = static_cast<int>(*v);
    return Status::Ok();
  };
  // A width that may differ per layer: one integer, or an array of
  // block_count integers (llama.cpp's get_key_or_arr); `out` gets the
  // largest, `per_layer` each layer's (left empty when they are all equal).
  auto req_layers = [&](const std::string& key, int* out, std::vector<int>* per_layer) -> Status {
    const GgufValue* v = f.Find(key);
    if (v == nullptr || v->type != GgufType::kArray) {
      per_layer->clear();
      return req(key, out);
    }
    if (v->ArraySize() != static_cast<uint64_t>(c.n_layer)) {
      return DataLoss(fmt::format("{}: {} has {} entries for {} layers", f.name(), key, v->ArraySize(), c.n_layer));
    }
    per_layer->clear();
    for (uint64_t l = 0; l < v->ArraySize(); ++l) {
      int64_t x = -1;
      if (!v->arr_i.empty()) x = v->arr_i[l];
      else if (!v->arr_u.empty()) x = v->arr_u[l] > (uint64_t{1} << 30) ? -1 : static_cast<int64_t>(v->arr_u[l]);
      if (x <= 0 || x > (int64_t{1} << 30)) return DataLoss(fmt::format("{}: {}[{}] out of range", f.name(), key, l));
      per_layer->push_back(static_cast<int>(x));
    }
    *out = *std::max_element(per_layer->begin(), per_layer->end());
    if (std::all_of(per_layer->begin(), per_layer->end(), [&](int x) { return x == *out; })) per_layer->clear();
    return Status::Ok();
  };
  RETURN_IF_ERROR(req(a + "embedding_length", &c.n_embd));
  RETURN_IF_ERROR(req(a + "block_count", &c.n_layer));
  if (c.n_layer > 1024) return DataLoss(fmt::format("{}: block_count {} out of range", f.name(), c.n_layer));
  RETURN_IF_ERROR(req_layers(a + "feed_forward_length", &c.n_ff, &c.layer_n_ff));
  if (f.Find(a + "expert_count")) {
    RETURN_IF_ERROR(req(a + "expert_count", &c.n_expert));
    if (c.n_expert > 1) {
      RETURN_IF_ERROR(req(a + "expert_used_count", &c.n_expert_used));
      c.n_ff_exp = c.n_ff;  // mixtral: the experts are feed_forward_length wide
      if (f.Find(a + "expert_feed_forward_length")) RETURN_IF_ERROR(req(a + "expert_feed_forward_length", &c.n_ff_exp));
      if (f.Find(a + "expert_shared_feed_forward_length")) {
        RETURN_IF_ERROR(req(a + "expert_shared_feed_forward_length", &c.n_ff_shexp));
      }
      if (auto v = f.GetBool(a + "expert_weights_norm")) c.expert_weights_norm = *v;
    } else {
      c.n_expert = 0;  // expert_count 0 / 1: a dense model
    }
  }
  RETURN_IF_ERROR(req_layers(a + "attention.head_count", &c.n_head, &c.layer_n_head));
  RETURN_IF_ERROR(req(a + "context_length", &c.n_ctx_train));
  c.n_head_kv = c.n_head;
  c.layer_n_head_kv = c.layer_n_head;
  if (f.Find(a + "attention.head_count_kv")) {
    RETURN_IF_ERROR(req_layers(a + "attention.head_count_kv", &c.n_head_kv, &c.layer_n_head_kv));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (f.Find(a + "attention.key_length")) RETURN_IF_ERROR(req(a + "attention.key_length", &c.head_dim));
  c.rope_dim = c.head_dim;
  if (f.Find(a + "rope.dimension_count")) RETURN_IF_ERROR(req(a + "rope.dimension_count", &c.rope_dim));
  c.rms_eps = static_cast<float>(f.GetFloat(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_theta = static_cast<float>(f.GetFloat(a + "rope.freq_base").value_or(10000.0));
  if (auto pt = f.GetInt(a + "pooling_type"); pt && *pt >= 0 && *pt <= 4) c.pooling_type = static_cast<int>(*pt);
  if (auto sw = f.GetInt(a + "attention.sliding_window")) c.sliding_window = static_cast<int>(std::max<int64_t>(0, *sw));
  auto scale = [&](const std::string& key, float* out) {
    if (auto v = f.GetFloat(a + key)) *out = static_cast<float>(*v);
  };
  scale("embedding_scale", &c.embedding_scale);
  scale("residual_scale", &c.residual_scale);
  scale("attention.scale", &c.attention_scale);
  scale("logit_scale", &c.logit_scale);
  scale("attn_logit_softcapping", &c.attn_softcap);
  scale("final_logit_softcapping", &c.final_softcap);
  scale("rope.freq_base_swa", &c.rope_theta_swa);
  if (c.arch == Arch::kGemma2 && !f.Find(a + "attention.sliding_window")) c.sliding_window = 4096;  // as llama.cpp
  if (!f.Find(a + "attention.scale") && info->gguf_attention_scale == ArchInfo::GgufAttentionScale::kGemma &&
      (c.n_layer == 46 || c.n_layer == 62) && c.n_embd / c.n_head != c.head_dim) {
    // llama.cpp's rule for the 27B models (query_pre_attn_scalar = n_embd / n_head).
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  }
  auto& rs = c.rope_scaling;
  if (auto n = f.GetInt(a + "rope.scaling.original_context_length"); n && *n > 0 && *n < (int64_t{1} << 30)) {
    rs.original_max_position = static_cast<int>(*n);
  }
  const float attn_factor = static_cast<float>(f.GetFloat(a + "rope.scaling.attn_factor").value_or(0.0));
  if (auto t = f.GetString(a + "rope.scaling.type")) {
    if (*t == "linear") {
      rs.type = RopeScaling::Type::kLinear;
      rs.factor = static_cast<float>(f.GetFloat(a + "rope.scaling.factor").value_or(1.0));
    } else if (*t == "yarn") {
      // llama.cpp: cos and sin times attn_factor (default 1) * (1 + 0.1 ln factor).
      rs.type = RopeScaling::Type::kYarn;
      rs.factor = static_cast<float>(f.GetFloat(a + "rope.scaling.factor").value_or(1.0));
      rs.yarn_beta_fast = static_cast<float>(f.GetFloat(a + "rope.scaling.yarn_beta_fast").value_or(32.0));
      rs.yarn_beta_slow = static_cast<float>(f.GetFloat(a + "rope.scaling.yarn_beta_slow").value_or(1.0));
      rs.mscale = (attn_factor > 0 ? attn_factor : 1.0f) * YarnDefaultMscale(rs.factor);
      if (!f.Find(a + "rope.scaling.original_context_length")) {
        return DataLoss(f.name() + ": yarn rope scaling needs rope.scaling.original_context_length");
      }
    } else if (*t != "none") {
      return Unimplemented(f.name() + ": unsupported rope scaling type '" + *t + "'");
    }
  }
  // llama3-style scaling arrives as the rope_freqs.weight tensor (read by the
  // loader), LongRoPE's as rope_factors_long / _short.
  if (f.FindTensor("rope_factors_long.weight") != nullptr) {
    rs.type = RopeScaling::Type::kLongRope;
    if (!f.Find(a + "rope.scaling.original_context_length")) {
      return DataLoss(f.name() + ": LongRoPE factors need rope.scaling.original_context_length");
    }
    rs.factor = static_cast<float>(c.n_ctx_train) / rs.original_max_position;
    rs.mscale = attn_factor > 0 ? attn_factor : LongRopeDefaultMscale(rs.factor, rs.original_max_position);
  }
  c.tied_embeddings = f.FindTensor(GlobalTensorName(&ModelWeights::output)) == nullptr;
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  if (auto v = f.GetInt(a + "vocab_size")) c.n_vocab = static_cast<int>(*v);
  else if (tokens && tokens->type == GgufType::kArray) c.n_vocab = static_cast<int>(tokens->ArraySize());
  else if (const auto* e = f.FindTensor(GlobalTensorName(&ModelWeights::tok_embd)); e && e->ne.size() == 2) {
    c.n_vocab = static_cast<int>(e->ne[1]);
  }
  RETURN_IF_ERROR(c.Validate(f.name()));
  return c;
}

namespace {
StatusOr<ModelConfig> ConfigFromHfJsonUnchecked(const std::string& text, const std::string& source) {
  using nlohmann::json;
  json j = ParseJson(text);
  if (j.is_discarded() || !j.is_object()) return DataLoss(source + ": not a JSON object");
  // A multimodal checkpoint: its language model's config (text_config over
  // the family's defaults); the vision part is not used.
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string wrapper = j["architectures"][0].get<std::string>();
    for (const ArchInfo* a : AllArchs()) {
      const auto& mm = a->hf_multimodal_architectures;
      if (std::find(mm.begin(), mm.end(), wrapper) == mm.end()) continue;
      auto tc = j.find("text_config");
      if (tc == j.end() || !tc->is_object()) return DataLoss(source + ": " + wrapper + " without a text_config object");
      json text_cfg = ParseJson(a->hf_text_config_defaults);
      CHECK(text_cfg.is_object());  // the table's own defaults
      text_cfg.update(*tc);
      j = std::move(text_cfg);
      break;
    }
  }
  ModelConfig c;
  // model_type names the family; older configs only list "architectures".
  std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (type.empty() && j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    type = j["architectures"][0].get<std::string>();
  }
  const ArchInfo* info = FindArchByHf(type);
  if (info == nullptr) {
    return Unimplemented(source + ": unsupported architecture '" + (type.empty() ? "(none)" : type) +
                         "' (supported: " + SupportedArchNames() + ")");
  }
  ApplyArchShape(*info, &c);
  c.name = info->name;
  auto get_int = [&](const char* key, int* out, bool required) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required) return DataLoss(source + ": missing required key '" + key + "'");
      return Status::Ok();
    }
    if (!it->is_number_integer()) return DataLoss(source + ": '" + key + "' must be an integer");
    int64_t v = it->get<int64_t>();
    if (v < 0 || v > (int64_t{1} << 30)) return DataLoss(fmt::format("{}: '{}' = {} out of range", source, key, v));
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  auto get_float = [&](const char* key, float* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number()) return DataLoss(source + ": '" + key + "' must be a number");
    *out = it->get<float>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(get_int("vocab_size", &c.n_vocab, true));
  RETURN_IF_ERROR(get_int("hidden_size", &c.n_embd, true));
  RETURN_IF_ERROR(get_int("num_hidden_layers", &c.n_layer, true));
  RETURN_IF_ERROR(get_int("num_attention_heads", &c.n_head, true));
  RETURN_IF_ERROR(get_int("intermediate_size", &c.n_ff, true));
  // Sparse MoE (mixtral: num_local_experts; qwen: num_experts).
  RETURN_IF_ERROR(get_int("num_local_experts", &c.n_expert, false));
  RETURN_IF_ERROR(get_int("num_experts", &c.n_expert, false));
  if (c.n_expert == 1) c.n_expert = 0;
  if (c.n_expert > 0) {
    RETURN_IF_ERROR(get_int("num_experts_per_tok", &c.n_expert_used, true));
    c.n_ff_exp = c.n_ff;
    RETURN_IF_ERROR(get_int("moe_intermediate_size", &c.n_ff_exp, false));
    RETURN_IF_ERROR(get_int("shared_expert_intermediate_size", &c.n_ff_shexp, false));
    // Mixtral always renormalizes; Qwen's configs say (HF's default: no).
    if (info->arch != Arch::kMixtral) c.expert_weights_norm = j.value("norm_topk_prob", false);
    int sparse_step = 1;
    RETURN_IF_ERROR(get_int("decoder_sparse_step", &sparse_step, false));
    auto dense_layers = j.find("mlp_only_layers");
    if (sparse_step != 1 || (dense_layers != j.end() && dense_layers->is_array() && !dense_layers->empty())) {
      return Unimplemented(source + ": dense layers between MoE layers (decoder_sparse_step, mlp_only_layers) "
                                    "are not supported");
    }
  }
  c.n_head_kv = c.n_head;
  RETURN_IF_ERROR(get_int("num_key_value_heads", &c.n_head_kv, false));
  c.n_ctx_train = 2048;
  RETURN_IF_ERROR(get_int("max_position_embeddings", &c.n_ctx_train, false));
  c.head_dim = c.n_head > 0 ? c.n_embd / c.n_head : 0;
  RETURN_IF_ERROR(get_int("head_dim", &c.head_dim, false));
  c.rope_dim = c.head_dim;
  RETURN_IF_ERROR(get_float("rms_norm_eps", &c.rms_eps));
  RETURN_IF_ERROR(get_float("rope_theta", &c.rope_theta));
  RETURN_IF_ERROR(get_int("sliding_window", &c.sliding_window, false));
  RETURN_IF_ERROR(get_float("embedding_multiplier", &c.embedding_scale));
  RETURN_IF_ERROR(get_float("residual_multiplier", &c.residual_scale));
  RETURN_IF_ERROR(get_float("attention_multiplier", &c.attention_scale));
  RETURN_IF_ERROR(get_float("logits_scaling", &c.logit_scale));
  RETURN_IF_ERROR(get_float("attn_logit_softcapping", &c.attn_softcap));
  RETURN_IF_ERROR(get_float("final_logit_softcapping", &c.final_softcap));
  RETURN_IF_ERROR(get_float("rope_local_base_freq", &c.rope_theta_swa));
  if (c.arch == Arch::kGemma2 && !j.contains("sliding_window")) c.sliding_window = 4096;
  float qpas = 0;  // gemma: scores scaled by 1/sqrt(query_pre_attn_scalar)
  RETURN_IF_ERROR(get_float("query_pre_attn_scalar", &qpas));
  if (qpas < 0) return DataLoss(source + ": query_pre_attn_scalar must be positive");
  if (qpas > 0 && qpas != static_cast<float>(c.head_dim)) c.attention_scale = 1.0f / std::sqrt(qpas);
  int pattern = c.swa_period;
  RETURN_IF_ERROR(get_int("sliding_window_pattern", &pattern, false));
  if (pattern != c.swa_period) {
    return Unimplemented(fmt::format("{}: sliding_window_pattern {} differs from {}'s {} (not supported)", source,
                                     pattern, info->name, c.swa_period));
  }
  if (auto it = j.find("clip_qkv"); it != j.end() && !it->is_null()) {
    return Unimplemented(source + ": clip_qkv is not supported");
  }
  using SW = ArchInfo::HfSlidingWindow;
  if (info->hf_sliding_window == SW::kNever) c.sliding_window = 0;
  if (info->hf_sliding_window == SW::kIfUseSlidingWindow && !j.value("use_sliding_window", false)) c.sliding_window = 0;
  c.tied_embeddings = j.value("tie_word_embeddings", false);
  c.qkv_bias = info->qkv_bias ||
               (j.contains("attention_bias") && j["attention_bias"].is_boolean() && j["attention_bias"].get<bool>());
  // (Weights are permuted at load into GGUF's pair layout for llama/mistral,
  // so the rotary style matches what the GGUF of the same model would use.)
  if (auto it = j.find("rope_scaling"); it != j.end() && it->is_object()) {
    const auto& rs = *it;
    std::string t = rs.value("rope_type", rs.value("type", std::string()));
    auto num = [&](const char* k, float def) {
      auto f = rs.find(k);
      return f != rs.end() && f->is_number() ? f->get<float>() : def;
    };
    // original_max_position_embeddings as a context length: a whole number
    // of tokens in [1, 2^24], else `bad` (untrusted files: never cast a huge
    // or NaN value to int).
    auto orig_positions = [&](float def, int bad) {
      const float v = num("original_max_position_embeddings", def);
      return v >= 1 && v <= static_cast<float>(1 << 24) ? static_cast<int>(v) : bad;
    };
    if (t == "llama3") {
      c.rope_scaling.type = RopeScaling::Type::kLlama3;
      c.rope_scaling.factor = num("factor", 8.0f);
      c.rope_scaling.low_freq_factor = num("low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = num("high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position = orig_positions(8192, -1);
      if (c.rope_scaling.original_max_position <= 0) {
        return DataLoss(source + ": llama3 rope scaling needs original_max_position_embeddings in [1, 2^24]");
      }
      if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor)) {
        return DataLoss(source + ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
      }
    } else if (t == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = num("factor", 1.0f);
    } else if (t == "yarn" || t == "longrope" || t == "su") {
      auto& s = c.rope_scaling;
      if (rs.contains("mscale") || rs.contains("mscale_all_dim")) {
        return Unimplemented(source + ": DeepSeek-style yarn mscale is not supported");
      }
      // original_max_position_embeddings: in rope_scaling or (Phi-3) the config.
      int orig = 0;
      RETURN_IF_ERROR(get_int("original_max_position_embeddings", &orig, false));
      s.original_max_position = orig_positions(static_cast<float>(orig), 0);
      if (s.original_max_position <= 0) {
        return DataLoss(source + ": " + t + " rope scaling needs original_max_position_embeddings");
      }
      const float attention_factor = num("attention_factor", 0.0f);
      if (t == "yarn") {
        s.type = RopeScaling::Type::kYarn;
        s.factor = num("factor", 1.0f);
        s.yarn_beta_fast = num("beta_fast", 32.0f);
        s.yarn_beta_slow = num("beta_slow", 1.0f);
        s.mscale = attention_factor > 0 ? attention_factor : YarnDefaultMscale(s.factor);
      } else {
        s.type = RopeScaling::Type::kLongRope;
        s.factor = static_cast<float>(c.n_ctx_train) / s.original_max_position;
        s.mscale = attention_factor > 0 ? attention_factor : LongRopeDefaultMscale(s.factor, s.original_max_position);
        auto factors = [&](const char* key, std::vector<float>* out) -> Status {
          auto a = rs.find(key);
          if (a == rs.end() || !a->is_array() || static_cast<int>(a->size()) != c.rope_dim / 2) {
            return DataLoss(fmt::format("{}: longrope needs '{}' with {} numbers", source, key, c.rope_dim / 2));
          }
          for (const auto& v : *a) {
            if (!v.is_number() || !(v.get<float>() > 0)) return DataLoss(source + ": longrope factors must be positive");
            out->push_back(v.get<float>());
          }
          return Status::Ok();
        };
        RETURN_IF_ERROR(factors("short_factor", &s.short_factors));
        RETURN_IF_ERROR(factors("long_factor", &s.long_factors));
      }
    } else if (!t.empty() && t != "default") {
      return Unimplemented(source + ": unsupported rope_scaling type '" + t + "'");
    }
  }
  if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array() && c.sliding_window > 0) {
    for (int l = 0; l < static_cast<int>(lt->size()) && l < c.n_layer; ++l) {
      const bool sliding = (*lt)[l].is_string() && (*lt)[l].get<std::string>() == "sliding_attention";
      if (sliding != c.LayerIsSliding(l)) {
        return Unimplemented(source + ": layer_types does not follow " + info->name +
                             "'s sliding-window pattern (not supported)");
      }
    }
  }
  RETURN_IF_ERROR(c.Validate(source));
  return c;
}
}  // namespace

StatusOr<ModelConfig> ConfigFromHfJson(const std::string& text, const std::string& source) {
  try {
    return ConfigFromHfJsonUnchecked(text, source);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(source + ": invalid config: " + e.what());
  }
}

ModelConfig ConfigFromLlama2c(const Llama2cHeader& h) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.name = "llama2.c";
  c.n_vocab = h.vocab_size;
  c.n_embd = h.dim;
  c.n_layer = h.n_layers;
  c.n_head = h.n_heads;
  c.n_head_kv = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.rope_dim = c.head_dim;
  c.n_ff = h.hidden_dim;
  c.n_ctx_train = h.seq_len;
  c.rms_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kNorm;
  c.tied_embeddings = h.shared_classifier;
  return c;
}

std::vector<float> Llama3RopeFreqFactors(const ModelConfig& c) {
  const auto& s = c.rope_scaling;
  std::vector<float> out(c.rope_dim / 2);
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / c.rope_dim);
    const double wavelen = 2 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) f = 1.0;
    else if (wavelen > low_wavelen) f = s.factor;
    else {
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1 - smooth) / s.factor + smooth);
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

}  // namespace infera
