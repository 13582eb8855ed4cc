// Gemma 2: norms before and after both blocks (HF input_layernorm,
// post_attention_layernorm, pre_feedforward_layernorm,
// post_feedforward_layernorm; GGUF attn_norm, post_attention_norm,
// ffn_norm, post_ffw_norm), RMSNorm weights applied as (1 + w), a GELU-tanh
// gated FFN, embeddings times sqrt(n_embd), attention scores soft-capped
// (50) and final logits soft-capped (30), a sliding window (4096) on every
// other layer starting with the first, scores scaled by
// 1/sqrt(query_pre_attn_scalar), rotary embedding over halves, tied output.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Gemma2Arch() {
  static const ArchInfo info{
      .arch = Arch::kGemma2,
      .name = "gemma2",
      .hf_architectures = {"Gemma2ForCausalLM"},
      .hf_model_types = {"gemma2"},
      .rope_style = RopeStyle::kNeox,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kAlways,
      .post_norm = true,
      .activation = Activation::kGeluTanh,
      .embed_scale_sqrt_dim = true,
      .swa_period = 2,
      .gguf_attention_scale = ArchInfo::GgufAttentionScale::kGemma,
      .hf_norm_plus_one = true,
      .hf_tensor_names = {{"ffn_norm.weight", "pre_feedforward_layernorm.weight"}},
  };
  return info;
}

}  // namespace infera
