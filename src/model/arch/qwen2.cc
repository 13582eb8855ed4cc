// Qwen2 / Qwen2.5: Llama's blocks with biases on Q, K and V and rotary
// embedding over halves (NEOX layout, in HF and GGUF files alike); the
// sliding window only when the HF config enables it.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen2Arch() {
  static const ArchInfo info{Arch::kQwen2,
                             "qwen2",
                             "qwen2",
                             {"Qwen2ForCausalLM"},
                             {"qwen2"},
                             RopeStyle::kNeox,
                             /*qkv_bias=*/true,
                             /*qk_norm=*/false,
                             /*fused=*/false,
                             ArchInfo::HfSlidingWindow::kIfUseSlidingWindow};
  return info;
}

}  // namespace infera
