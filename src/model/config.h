// Model hyper-parameters, read from GGUF metadata, a Hugging Face config.json
// or a llama2.c header, and validated once so the forward pass can trust them.
#pragma once

#include <string>
#include <vector>

#include "formats/gguf_reader.h"
#include "formats/llama2c.h"
#include "infera/status.h"

namespace infera {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kGranite, kPhi3 };
const char* ArchName(Arch a);

// kNorm: rotate adjacent pairs (x[2i], x[2i+1]) — GGUF llama and llama2.c.
// kNeox: rotate halves (x[i], x[i + d/2]) — HF layout, GGUF qwen2.
enum class RopeStyle { kNorm, kNeox };

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 } type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;  // rotated dims per head (== head_dim for these families)
  RopeStyle rope_style = RopeStyle::kNorm;
  RopeScaling rope_scaling;
  int sliding_window = 0;  // 0: full attention
  bool qkv_bias = false;
  bool qk_norm = false;  // RMSNorm over each head of Q and K before RoPE (qwen3)
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

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  Status Validate(const std::string& source) const;
};

StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& f);
// `json_text` is the content of config.json; `source` names it in errors.
StatusOr<ModelConfig> ConfigFromHfJson(const std::string& json_text, const std::string& source);
ModelConfig ConfigFromLlama2c(const Llama2cHeader& h);

// Per-frequency divisors for llama3 rope scaling (head_dim / 2 values), the
// same values llama.cpp's converter stores as rope_freqs.weight.
std::vector<float> Llama3RopeFreqFactors(const ModelConfig& c);

}  // namespace infera
