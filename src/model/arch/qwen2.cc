// Qwen2 / Qwen2.5: Llama's blocks with biases on Q, K and V and rotary
// embedding over halves (NEOX layout, in HF and GGUF files alike); the
// sliding window only when the HF config enables it.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Qwen2Arch() {
  static const ArchInfo info{
      .arch = Arch::kQwen2,
      .name = "qwen2",
      .hf_architectures = {"Qwen2ForCausalLM"},
      .hf_model_types = {"qwen2"},
      .rope_style = RopeStyle::kNeox,
      .qkv_bias = true,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kIfUseSlidingWindow,
  };
  return info;
}

}  // namespace infera
