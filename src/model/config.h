// Model hyper-parameters, read from GGUF metadata, a Hugging Face config.json
// or a llama2.c header, and validated once so the forward pass can trust them.
#pragma once

#include <string>
#include <vector>

#include "attention/rope.h"
#include "formats/gguf_reader.h"
#include "formats/llama2c.h"
#include "infera/status.h"

namespace infera {

enum class Arch {
  kLlama, kMistral, kQwen2, kQwen3, kGranite, kPhi3, kGemma2, kGemma3, kOlmo2, kMixtral, kQwen2Moe, kQwen3Moe
};
const char* ArchName(Arch a);

// The gate's activation in the gated feed-forward act(gate) * up.
enum class Activation { kSilu, kGeluTanh };

// RMSNorm of Q and K before RoPE: none, over each head (qwen3, gemma3:
// a [head_dim] weight) or over the whole projection (olmo2: [q_dim] and
// [kv_dim] weights).
enum class QkNorm { kNone, kPerHead, kFull };

// What differs from layer to layer (see ModelConfig::Layer).
struct LayerConfig {
  int n_head = 0, n_head_kv = 0, n_ff = 0;
  int sliding_window = 0;  // 0: global attention
  float rope_theta = 10000.0f;
  float rope_linear_factor = 1.0f;  // linear position interpolation (1: none)
};

struct RopeScaling {
  // kLlama3: frequency divisors from the factors below (rope_freqs.weight).
  // kYarn: YaRN over original_max_position. kLongRope: Phi-3's short / long
  // frequency divisors (rope_factors_short / _long), the long ones when the
  // context in use exceeds original_max_position.
  enum class Type { kNone, kLinear, kLlama3, kYarn, kLongRope } type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float mscale = 1.0f;  // YaRN / LongRoPE attention factor on cos and sin
  // LongRoPE divisors from an HF config.json ([rope_dim / 2] each; GGUF files
  // carry them as tensors).
  std::vector<float> short_factors, long_factors;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  // Attention heads, KV heads and dense FFN width (MoE families: n_ff is
  // unused). With per-layer widths (structured pruning; GGUF arrays, as
  // llama.cpp reads them) these are the largest over the layers and the
  // layer_* vectors [n_layer] hold each layer's; empty: every layer the same.
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  std::vector<int> layer_n_head, layer_n_head_kv, layer_n_ff;
  // Sparse MoE FFN (n_expert > 0): a router picks n_expert_used of n_expert
  // experts per token (softmax over all, top-k, renormalized when
  // expert_weights_norm); each expert is a gated FFN of width n_ff_exp.
  // n_ff_shexp > 0: plus a shared expert of that width, scaled by
  // sigmoid(x · ffn_gate_inp_shexp) (qwen2moe).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;
  bool expert_weights_norm = true;
  int n_ctx_train = 0;
  // GGUF {arch}.pooling_type (llama.cpp's: 0 none, 1 mean, 2 CLS, 3 last,
  // 4 rank); -1: the file does not say.
  int pooling_type = -1;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;  // rotated dims per head (== head_dim for these families)
  RopeStyle rope_style = RopeStyle::kNorm;
  RopeScaling rope_scaling;
  int sliding_window = 0;  // 0: full attention
  // Which layers use the window: 0 every layer; N > 0: layer l slides iff
  // l % N < N - 1 (gemma2: 2, every other layer from the first; gemma3: 6,
  // five local layers to one global one).
  int swa_period = 0;
  float rope_theta_swa = 0.0f;  // RoPE base of sliding layers (0: rope_theta); gemma3: 10k
  bool qkv_bias = false;
  QkNorm qk_norm = QkNorm::kNone;
  // Norm placement: pre_norm — attn_norm / ffn_norm on each block's input
  // (llama); post_norm — post_attention_norm / post_ffw_norm on each block's
  // output before it joins the residual (olmo2: post only; gemma: both).
  bool pre_norm = true;
  bool post_norm = false;
  Activation activation = Activation::kSilu;
  // Gemma: token embeddings times sqrt(n_embd); soft-capping of attention
  // scores and of the final logits (cap * tanh(x / cap); 0: off).
  bool embed_scale_sqrt_dim = false;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Q, K, V in one tensor (attn_qkv) and gate + up in one (ffn_up, 2 n_ff
  // rows: gate first), as phi3 stores them.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // Granite's multipliers (1 / 0: off): token embeddings are scaled by
  // embedding_scale, each block's output by residual_scale before it joins
  // the residual stream, attention scores by attention_scale instead of
  // 1/sqrt(head_dim), and the logits are divided by logit_scale.
  float embedding_scale = 1.0f;
  float residual_scale = 1.0f;
  float attention_scale = 0.0f;
  float logit_scale = 1.0f;
  bool tied_embeddings = false;

  int q_dim() const { return n_head * head_dim; }  // the largest layer's
  int n_head_at(int l) const { return layer_n_head.empty() ? n_head : layer_n_head[l]; }
  int n_head_kv_at(int l) const { return layer_n_head_kv.empty() ? n_head_kv : layer_n_head_kv[l]; }
  int n_ff_at(int l) const { return layer_n_ff.empty() ? n_ff : layer_n_ff[l]; }
  bool variable_widths() const { return !layer_n_head.empty() || !layer_n_head_kv.empty() || !layer_n_ff.empty(); }
  // KV heads of every layer [n_layer] (KV storage layout).
  std::vector<int> KvHeadsPerLayer() const;
  bool moe() const { return n_expert > 0; }
  bool LayerIsSliding(int layer) const {
    return sliding_window > 0 && (swa_period == 0 || layer % swa_period < swa_period - 1);
  }
  LayerConfig Layer(int layer) const;
  int kv_dim() const { return n_head_kv * head_dim; }  // the largest layer's
  Status Validate(const std::string& source) const;
};

StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& f);
// `json_text` is the content of config.json; `source` names it in errors.
StatusOr<ModelConfig> ConfigFromHfJson(const std::string& json_text, const std::string& source);
ModelConfig ConfigFromLlama2c(const Llama2cHeader& h);

// LongRoPE's attention factor sqrt(1 + ln(factor) / ln(original_ctx)).
float LongRopeDefaultMscale(float factor, int original_ctx);

// Per-frequency divisors for llama3 rope scaling (head_dim / 2 values), the
// same values llama.cpp's converter stores as rope_freqs.weight.
std::vector<float> Llama3RopeFreqFactors(const ModelConfig& c);

}  // namespace infera
