// Llama 1/2/3 (and llama2.c checkpoints): the baseline every other family
// is described against. Pre-norm RMSNorm blocks, rotary embedding over
// adjacent pairs (GGUF layout), SwiGLU feed-forward, no biases.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& LlamaArch() {
  static const ArchInfo info{Arch::kLlama,
                             "llama",
                             "llama",
                             {"LlamaForCausalLM"},
                             {"llama"},
                             RopeStyle::kNorm,
                             /*qkv_bias=*/false,
                             /*qk_norm=*/false,
                             /*fused=*/false,
                             ArchInfo::HfSlidingWindow::kNever};
  return info;
}

}  // namespace infera
