// Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3's attention (per-head Q/K norms, no
// biases) with a sparse MoE FFN — 128 experts, top-8 of the softmax,
// renormalized (norm_topk_prob) — and no shared expert.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen3MoeArch() {
  static const ArchInfo info{
      .arch = Arch::kQwen3Moe,
      .name = "qwen3moe",
      .hf_architectures = {"Qwen3MoeForCausalLM"},
      .hf_model_types = {"qwen3_moe"},
      .rope_style = RopeStyle::kNeox,
      .qk_norm = QkNorm::kPerHead,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kIfUseSlidingWindow,
  };
  return info;
}

}  // namespace infera
