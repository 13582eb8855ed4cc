// Qwen3 (dense): Qwen2's blocks without the Q/K/V biases and with an
// RMSNorm over every head of Q and K before RoPE (attn_q_norm / attn_k_norm,
// one weight vector of head_dim each); head_dim is set explicitly and may
// differ from n_embd / n_head. Chat format: ChatML.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen3Arch() {
  static const ArchInfo info{Arch::kQwen3,
                             "qwen3",
                             "qwen3",
                             {"Qwen3ForCausalLM"},
                             {"qwen3"},
                             RopeStyle::kNeox,
                             /*qkv_bias=*/false,
                             /*qk_norm=*/true,
                             /*fused=*/false,
                             ArchInfo::HfSlidingWindow::kIfUseSlidingWindow};
  return info;
}

}  // namespace infera
