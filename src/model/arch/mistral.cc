// Mistral: Llama's blocks with a sliding attention window from the HF
// config; llama.cpp writes these models as "llama".
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& MistralArch() {
  static const ArchInfo info{Arch::kMistral,
                             "mistral",
                             "llama",
                             {"MistralForCausalLM"},
                             {"mistral"},
                             RopeStyle::kNorm,
                             /*qkv_bias=*/false,
                             /*qk_norm=*/false,
                             /*fused=*/false,
                             ArchInfo::HfSlidingWindow::kAlways};
  return info;
}

}  // namespace infera
