#include "model/tensor_schema.h"

#include <fmt/format.h>

#include "model/arch/registry.h"

namespace infera {

namespace {

using MW = ModelWeights;
using LW = LayerWeights;

TensorRole GlobalMatrix(const char* gguf, const char* hf, Dim n_in, Dim n_out, Presence p, WeightMatrix MW::*m) {
  return {gguf, hf, false, n_in, n_out, true, p, Permute::kNone, Init::kNormal, m, nullptr, nullptr, nullptr, {}};
}
TensorRole GlobalVector(const char* gguf, const char* hf, Dim n, Presence p, Init init, std::vector<float> MW::*v) {
  return {gguf, hf, false, n, n, false, p, Permute::kNone, init, nullptr, v, nullptr, nullptr, {}};
}
TensorRole GlobalNorm(const char* gguf, const char* hf, std::vector<float> MW::*v) {
  TensorRole r = GlobalVector(gguf, hf, Dim::kEmbd, Presence::kAlways, Init::kOnes, v);
  r.norm = true;
  return r;
}
TensorRole LayerMatrix(const char* gguf, const char* hf, Dim n_in, Dim n_out, Permute perm, WeightMatrix LW::*m,
                       Presence p = Presence::kAlways) {
  return {gguf, hf, true, n_in, n_out, true, p, perm, Init::kNormal, nullptr, nullptr, m, nullptr, {}};
}
TensorRole FusedMatrix(const char* gguf, const char* hf, Dim n_in, Presence p, std::vector<FusedPart> parts) {
  return {gguf, hf, true, n_in, n_in, true, p, Permute::kNone, Init::kNormal, nullptr, nullptr, nullptr, nullptr,
          std::move(parts)};
}
TensorRole LayerVector(const char* gguf, const char* hf, Dim n, Presence p, Permute perm, Init init,
                       std::vector<float> LW::*v) {
  return {gguf, hf, true, n, n, false, p, perm, init, nullptr, nullptr, nullptr, v, {}};
}
TensorRole ExpertMatrix(const char* gguf, const char* hf, const char* gguf_per_expert, Dim n_in, Dim n_out,
                        std::vector<WeightMatrix> LW::*m) {
  TensorRole r{gguf, hf, true, n_in, n_out, true, Presence::kMoe, Permute::kNone, Init::kNormal,
               nullptr, nullptr, nullptr, nullptr, {}};
  r.layer_experts = m;
  r.gguf_per_expert = gguf_per_expert;
  return r;
}
TensorRole LayerNorm(const char* gguf, const char* hf, Dim n, Presence p, std::vector<float> LW::*v) {
  TensorRole r = LayerVector(gguf, hf, n, p, Permute::kNone, Init::kOnes, v);
  r.norm = true;
  return r;
}

std::vector<TensorRole> MakeRoles() {
  return {
      GlobalMatrix("token_embd.weight", "model.embed_tokens.weight", Dim::kEmbd, Dim::kVocab, Presence::kAlways,
                   &MW::tok_embd),
      GlobalNorm("output_norm.weight", "model.norm.weight", &MW::output_norm),
      GlobalMatrix("output.weight", "lm_head.weight", Dim::kEmbd, Dim::kVocab, Presence::kUntied, &MW::output),
      // llama3 RoPE frequency divisors, as llama.cpp's converter stores them
      // (computed from the config when absent).
      GlobalVector("rope_freqs.weight", "", Dim::kRopeHalf, Presence::kOptional, Init::kOnes,
                   &MW::rope_freq_factors),
      // LongRoPE (phi3 128k): frequency divisors for short and long contexts.
      GlobalVector("rope_factors_long.weight", "", Dim::kRopeHalf, Presence::kOptional, Init::kOnes,
                   &MW::rope_factors_long),
      GlobalVector("rope_factors_short.weight", "", Dim::kRopeHalf, Presence::kOptional, Init::kOnes,
                   &MW::rope_factors_short),
      LayerNorm("attn_norm.weight", "input_layernorm.weight", Dim::kEmbd, Presence::kPreNorm, &LW::attn_norm),
      LayerMatrix("attn_q.weight", "self_attn.q_proj.weight", Dim::kEmbd, Dim::kQ, Permute::kQHeads, &LW::wq,
                  Presence::kSplitQkv),
      LayerMatrix("attn_k.weight", "self_attn.k_proj.weight", Dim::kEmbd, Dim::kKv, Permute::kKvHeads, &LW::wk,
                  Presence::kSplitQkv),
      LayerMatrix("attn_v.weight", "self_attn.v_proj.weight", Dim::kEmbd, Dim::kKv, Permute::kNone, &LW::wv,
                  Presence::kSplitQkv),
      FusedMatrix("attn_qkv.weight", "self_attn.qkv_proj.weight", Dim::kEmbd, Presence::kFusedQkv,
                  {{&LW::wq, Dim::kQ}, {&LW::wk, Dim::kKv}, {&LW::wv, Dim::kKv}}),
      LayerMatrix("attn_output.weight", "self_attn.o_proj.weight", Dim::kQ, Dim::kEmbd, Permute::kNone, &LW::wo),
      LayerVector("attn_q.bias", "self_attn.q_proj.bias", Dim::kQ, Presence::kQkvBias, Permute::kQHeads,
                  Init::kZeros, &LW::bq),
      LayerVector("attn_k.bias", "self_attn.k_proj.bias", Dim::kKv, Presence::kQkvBias, Permute::kKvHeads,
                  Init::kZeros, &LW::bk),
      LayerVector("attn_v.bias", "self_attn.v_proj.bias", Dim::kKv, Presence::kQkvBias, Permute::kNone,
                  Init::kZeros, &LW::bv),
      // qwen3 / gemma3: one weight per head; olmo2: over the whole projection.
      LayerNorm("attn_q_norm.weight", "self_attn.q_norm.weight", Dim::kHead, Presence::kQkNormHead, &LW::q_norm),
      LayerNorm("attn_k_norm.weight", "self_attn.k_norm.weight", Dim::kHead, Presence::kQkNormHead, &LW::k_norm),
      LayerNorm("attn_q_norm.weight", "self_attn.q_norm.weight", Dim::kQ, Presence::kQkNormFull, &LW::q_norm),
      LayerNorm("attn_k_norm.weight", "self_attn.k_norm.weight", Dim::kKv, Presence::kQkNormFull, &LW::k_norm),
      LayerNorm("post_attention_norm.weight", "post_attention_layernorm.weight", Dim::kEmbd, Presence::kPostNorm,
                &LW::post_attn_norm),
      // (gemma: HF pre_feedforward_layernorm; see its registry file)
      LayerNorm("ffn_norm.weight", "post_attention_layernorm.weight", Dim::kEmbd, Presence::kPreNorm, &LW::ffn_norm),
      LayerMatrix("ffn_gate.weight", "mlp.gate_proj.weight", Dim::kEmbd, Dim::kFf, Permute::kNone, &LW::w_gate,
                  Presence::kSplitGateUp),
      LayerMatrix("ffn_up.weight", "mlp.up_proj.weight", Dim::kEmbd, Dim::kFf, Permute::kNone, &LW::w_up,
                  Presence::kSplitGateUp),
      // phi3: the same GGUF name with 2 n_ff rows (gate, then up).
      FusedMatrix("ffn_up.weight", "mlp.gate_up_proj.weight", Dim::kEmbd, Presence::kFusedGateUp,
                  {{&LW::w_gate, Dim::kFf}, {&LW::w_up, Dim::kFf}}),
      LayerMatrix("ffn_down.weight", "mlp.down_proj.weight", Dim::kFf, Dim::kEmbd, Permute::kNone, &LW::w_down,
                  Presence::kDenseFfn),
      // Sparse MoE: the router, the stacked experts, a shared expert.
      LayerMatrix("ffn_gate_inp.weight", "mlp.gate.weight", Dim::kEmbd, Dim::kExpert, Permute::kNone, &LW::router,
                  Presence::kMoe),
      ExpertMatrix("ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight", "ffn_gate.{e}.weight", Dim::kEmbd,
                   Dim::kFfExp, &LW::exp_gate),
      ExpertMatrix("ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight", "ffn_down.{e}.weight", Dim::kFfExp,
                   Dim::kEmbd, &LW::exp_down),
      ExpertMatrix("ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight", "ffn_up.{e}.weight", Dim::kEmbd,
                   Dim::kFfExp, &LW::exp_up),
      LayerVector("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", Dim::kEmbd, Presence::kSharedExpert,
                  Permute::kNone, Init::kNormal, &LW::sh_gate_inp),
      LayerMatrix("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", Dim::kEmbd, Dim::kFfShexp,
                  Permute::kNone, &LW::sh_gate, Presence::kSharedExpert),
      LayerMatrix("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", Dim::kFfShexp, Dim::kEmbd,
                  Permute::kNone, &LW::sh_down, Presence::kSharedExpert),
      LayerMatrix("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", Dim::kEmbd, Dim::kFfShexp,
                  Permute::kNone, &LW::sh_up, Presence::kSharedExpert),
      LayerNorm("post_ffw_norm.weight", "post_feedforward_layernorm.weight", Dim::kEmbd, Presence::kPostNorm,
                &LW::post_ffn_norm),
  };
}

constexpr char kGgufLayerPrefix[] = "blk.";
constexpr char kHfLayerPrefix[] = "model.layers.";

}  // namespace

const std::vector<TensorRole>& DecoderTensorRoles() {
  static const std::vector<TensorRole> roles = MakeRoles();  // immutable after first use
  return roles;
}

int64_t DimSize(const ModelConfig& c, Dim d, int layer) {
  switch (d) {
    case Dim::kEmbd: return c.n_embd;
    case Dim::kVocab: return c.n_vocab;
    case Dim::kQ: return static_cast<int64_t>(layer >= 0 ? c.n_head_at(layer) : c.n_head) * c.head_dim;
    case Dim::kKv: return static_cast<int64_t>(layer >= 0 ? c.n_head_kv_at(layer) : c.n_head_kv) * c.head_dim;
    case Dim::kFf: return layer >= 0 ? c.n_ff_at(layer) : c.n_ff;
    case Dim::kHead: return c.head_dim;
    case Dim::kRopeHalf: return c.rope_dim / 2;
    case Dim::kExpert: return c.n_expert;
    case Dim::kFfExp: return c.n_ff_exp;
    case Dim::kFfShexp: return c.n_ff_shexp;
  }
  return 0;
}

bool RoleIsPresent(const TensorRole& role, const ModelConfig& c) {
  switch (role.presence) {
    case Presence::kAlways: return true;
    case Presence::kUntied: return !c.tied_embeddings;
    case Presence::kQkvBias: return c.qkv_bias;
    case Presence::kQkNormHead: return c.qk_norm == QkNorm::kPerHead;
    case Presence::kQkNormFull: return c.qk_norm == QkNorm::kFull;
    case Presence::kPreNorm: return c.pre_norm;
    case Presence::kPostNorm: return c.post_norm;
    case Presence::kSplitQkv: return !c.fused_qkv;
    case Presence::kFusedQkv: return c.fused_qkv;
    case Presence::kSplitGateUp: return !c.moe() && !c.fused_gate_up;
    case Presence::kFusedGateUp: return !c.moe() && c.fused_gate_up;
    case Presence::kDenseFfn: return !c.moe();
    case Presence::kMoe: return c.moe();
    case Presence::kSharedExpert: return c.moe() && c.n_ff_shexp > 0;
    case Presence::kOptional: return true;
  }
  return false;
}

std::string GlobalTensorName(WeightMatrix ModelWeights::*member) {
  for (const TensorRole& r : DecoderTensorRoles()) {
    if (r.model_matrix == member) return r.gguf;
  }
  return {};
}

std::string GgufTensorName(const TensorRole& role, int layer) {
  return role.per_layer ? fmt::format("{}{}.{}", kGgufLayerPrefix, layer, role.gguf) : std::string(role.gguf);
}

std::string GgufExpertTensorName(const TensorRole& role, int layer, int e) {
  if (role.gguf_per_expert == nullptr) return {};
  std::string name = role.gguf_per_expert;
  const size_t at = name.find("{e}");
  name.replace(at, 3, std::to_string(e));
  return fmt::format("{}{}.{}", kGgufLayerPrefix, layer, name);
}

std::string HfTensorName(const TensorRole& role, int layer, const ModelConfig& c) {
  std::string hf = role.hf;
  for (const auto& [gguf, name] : GetArch(c.arch).hf_tensor_names) {
    if (gguf == role.gguf) hf = name;
  }
  if (hf.empty()) return {};
  return role.per_layer ? fmt::format("{}{}.{}", kHfLayerPrefix, layer, hf) : hf;
}

int64_t RoleRows(const TensorRole& role, const ModelConfig& c, int layer) {
  if (role.parts.empty()) return DimSize(c, role.n_out, layer);
  int64_t rows = 0;
  for (const FusedPart& p : role.parts) rows += DimSize(c, p.rows, layer);
  return rows;
}

std::vector<WeightMatrix*> RoleLayerMatrices(const TensorRole& role, LayerWeights* layer) {
  std::vector<WeightMatrix*> out;
  if (role.layer_matrix) out.push_back(&(layer->*role.layer_matrix));
  for (const FusedPart& p : role.parts) out.push_back(&(layer->*p.dest));
  if (role.layer_experts) {
    for (WeightMatrix& m : layer->*role.layer_experts) out.push_back(&m);
  }
  return out;
}

std::vector<const WeightMatrix*> RoleLayerMatrices(const TensorRole& role, const LayerWeights& layer) {
  std::vector<const WeightMatrix*> out;
  for (WeightMatrix* m : RoleLayerMatrices(role, const_cast<LayerWeights*>(&layer))) out.push_back(m);
  return out;
}

std::string HfNameForGguf(const std::string& gguf_name, const ModelConfig& c) {
  const std::string prefix = kGgufLayerPrefix;
  int layer = -1;
  std::string rest = gguf_name;
  if (gguf_name.compare(0, prefix.size(), prefix) == 0) {
    const size_t dot = gguf_name.find('.', prefix.size());
    if (dot == std::string::npos) return {};
    const std::string digits = gguf_name.substr(prefix.size(), dot - prefix.size());
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return {};
    layer = std::stoi(digits);
    rest = gguf_name.substr(dot + 1);
  }
  for (const TensorRole& r : DecoderTensorRoles()) {
    if (r.per_layer == (layer >= 0) && rest == r.gguf && RoleIsPresent(r, c)) return HfTensorName(r, layer, c);
  }
  return {};
}

WeightMatrix* RoleMatrix(const TensorRole& role, int layer, ModelWeights* w) {
  if (role.model_matrix) return &(w->*role.model_matrix);
  if (role.layer_matrix) return &(w->layers[layer].*role.layer_matrix);
  return nullptr;
}

std::vector<float>* RoleVector(const TensorRole& role, int layer, ModelWeights* w) {
  if (role.model_vector) return &(w->*role.model_vector);
  if (role.layer_vector) return &(w->layers[layer].*role.layer_vector);
  return nullptr;
}

const WeightMatrix* RoleMatrix(const TensorRole& role, int layer, const ModelWeights& w) {
  return RoleMatrix(role, layer, const_cast<ModelWeights*>(&w));
}

const std::vector<float>* RoleVector(const TensorRole& role, int layer, const ModelWeights& w) {
  return RoleVector(role, layer, const_cast<ModelWeights*>(&w));
}

}  // namespace infera
