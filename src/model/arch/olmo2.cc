// OLMo 2: Llama's tensors with the norms moved from each block's input to
// its output (HF post_attention_layernorm / post_feedforward_layernorm;
// GGUF post_attention_norm / post_ffw_norm; no attn_norm or ffn_norm), and
// an RMSNorm over the whole Q and K projections (q_norm [q_dim], k_norm
// [kv_dim]) before RoPE over halves.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Olmo2Arch() {
  static const ArchInfo info{
      .arch = Arch::kOlmo2,
      .name = "olmo2",
      .hf_architectures = {"Olmo2ForCausalLM"},
      .hf_model_types = {"olmo2"},
      .rope_style = RopeStyle::kNeox,
      .qk_norm = QkNorm::kFull,
      .pre_norm = false,
      .post_norm = true,
  };
  return info;
}

}  // namespace infera
