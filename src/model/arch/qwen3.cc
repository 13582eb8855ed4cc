// Qwen3 (dense): Qwen2's blocks without the Q/K/V biases and with an
// RMSNorm over every head of Q and K before RoPE (attn_q_norm / attn_k_norm,
// one weight vector of head_dim each); head_dim is set explicitly and may
// differ from n_embd / n_head. Chat format: ChatML.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen3Arch() {
  static const ArchInfo info{
      .arch = Arch::kQwen3,
      .name = "qwen3",
      .hf_architectures = {"Qwen3ForCausalLM"},
      .hf_model_types = {"qwen3"},
      .rope_style = RopeStyle::kNeox,
      .qk_norm = QkNorm::kPerHead,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kIfUseSlidingWindow,
  };
  return info;
}

}  // namespace infera
