// The architecture registry: what infera knows about each model family, as
// data. Every family has one file here defining its ArchInfo — the names it
// goes by in GGUF and Hugging Face files and how it differs from the Llama
// baseline (the defaults below) — and one line in registry.cc's list.
// Config readers, the tensor schema, GGUF writers, `info` and error messages
// look families up here instead of naming them in code.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace infera {

struct ArchInfo {
  // How an HF config's sliding_window applies: never (llama), always
  // (mistral), or only with "use_sliding_window": true (qwen2).
  enum class HfSlidingWindow { kNever, kAlways, kIfUseSlidingWindow };
  // How attention scores are scaled when a GGUF file has no
  // `attention.scale`: 1/sqrt(head_dim), or llama.cpp's Gemma rule
  // (1/sqrt(n_embd / n_head) for the 27B models — 46 or 62 layers — whose
  // query_pre_attn_scalar is that, else 1/sqrt(head_dim)).
  enum class GgufAttentionScale { kHeadDim, kGemma };

  Arch arch;
  const char* name;              // infera's name, also general.architecture when reading
  const char* gguf_write = nullptr;  // general.architecture written (null: name; mistral: "llama")
  std::vector<std::string> hf_architectures;  // config.json "architectures", e.g. "LlamaForCausalLM"
  std::vector<std::string> hf_model_types;    // config.json "model_type"
  RopeStyle rope_style = RopeStyle::kNorm;  // in infera's (GGUF's) layout; HF Q/K rows are permuted into it
  bool qkv_bias = false;       // always has q/k/v biases (else: HF "attention_bias")
  QkNorm qk_norm = QkNorm::kNone;
  bool fused = false;          // Q/K/V and gate/up stored fused (attn_qkv, ffn_up of 2 n_ff rows)
  HfSlidingWindow hf_sliding_window = HfSlidingWindow::kNever;
  // Block shape (see ModelConfig).
  bool pre_norm = true;
  bool post_norm = false;
  Activation activation = Activation::kSilu;
  bool embed_scale_sqrt_dim = false;
  int swa_period = 0;
  float rope_theta_swa = 0.0f;  // RoPE base of sliding layers when the file does not say
  GgufAttentionScale gguf_attention_scale = GgufAttentionScale::kHeadDim;
  // HF norm weights w are applied as (1 + w) (Gemma); GGUF stores 1 + w, as
  // llama.cpp's converter writes it, so HF norms get 1 added at load.
  bool hf_norm_plus_one = false;
  // MoE routing: renormalize the chosen experts' probabilities when the file
  // does not say (GGUF expert_weights_norm, HF norm_topk_prob).
  bool expert_weights_norm = true;
  // HF tensor names that differ from the Llama ones, by GGUF role name
  // ("ffn_norm.weight" -> "pre_feedforward_layernorm.weight"); layer roles
  // are relative to "model.layers.N.".
  std::vector<std::pair<std::string, std::string>> hf_tensor_names;
  // Multimodal HF checkpoints of the family (Gemma3ForConditionalGeneration):
  // the language model's config is the "text_config" object, over these
  // defaults (a JSON object: the keys the checkpoints leave out), and its
  // tensors sit under a prefix (see the HF loader); the rest is not loaded.
  std::vector<std::string> hf_multimodal_architectures;
  const char* hf_text_config_defaults = nullptr;

  const char* gguf_arch() const { return gguf_write != nullptr ? gguf_write : name; }
};

// One per family (each family's file).
const ArchInfo& LlamaArch();
const ArchInfo& MistralArch();
const ArchInfo& Qwen2Arch();
const ArchInfo& Qwen3Arch();
const ArchInfo& GraniteArch();
const ArchInfo& Phi3Arch();
const ArchInfo& Gemma2Arch();
const ArchInfo& Gemma3Arch();
const ArchInfo& Olmo2Arch();
const ArchInfo& MixtralArch();
const ArchInfo& Qwen2MoeArch();
const ArchInfo& Qwen3MoeArch();

// Sets the block shape `info` implies on c (arch, rope style, biases, q/k
// norms, fused tensors, norm placement, activation, embedding scale, window
// pattern): everything a file does not spell out.
void ApplyArchShape(const ArchInfo& info, ModelConfig* c);

// Every family, in a fixed order.
const std::vector<const ArchInfo*>& AllArchs();
const ArchInfo& GetArch(Arch arch);
// By general.architecture / HF architectures entry / HF model_type; null if unknown.
const ArchInfo* FindArchByGguf(const std::string& name);
const ArchInfo* FindArchByHf(const std::string& architecture_or_model_type);
// "llama, mistral, qwen2" for messages.
std::string SupportedArchNames();

}  // namespace infera
