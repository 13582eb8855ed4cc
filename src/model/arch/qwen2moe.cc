// Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (Q/K/V biases, NEOX RoPE) with
// a sparse MoE FFN — top-k of the softmax over all experts, not
// renormalized unless norm_topk_prob — plus a shared expert of its own width
// whose output is scaled by sigmoid(x · shared_expert_gate).
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen2MoeArch() {
  static const ArchInfo info{
      .arch = Arch::kQwen2Moe,
      .name = "qwen2moe",
      .hf_architectures = {"Qwen2MoeForCausalLM"},
      .hf_model_types = {"qwen2_moe"},
      .rope_style = RopeStyle::kNeox,
      .qkv_bias = true,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kIfUseSlidingWindow,
      .expert_weights_norm = false,
  };
  return info;
}

}  // namespace infera
