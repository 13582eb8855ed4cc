// Mistral: Llama's blocks with a sliding attention window from the HF
// config; llama.cpp writes these models as "llama".
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& MistralArch() {
  static const ArchInfo info{
      .arch = Arch::kMistral,
      .name = "mistral",
      .gguf_write = "llama",
      .hf_architectures = {"MistralForCausalLM"},
      .hf_model_types = {"mistral"},
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kAlways,
  };
  return info;
}

}  // namespace infera
