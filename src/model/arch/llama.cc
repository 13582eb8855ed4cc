// Llama 1/2/3 (and llama2.c checkpoints): the baseline every other family
// is described against (ArchInfo's defaults). Pre-norm RMSNorm blocks,
// rotary embedding over adjacent pairs (GGUF layout), SwiGLU feed-forward,
// no biases.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& LlamaArch() {
  static const ArchInfo info{
      .arch = Arch::kLlama,
      .name = "llama",
      .hf_architectures = {"LlamaForCausalLM"},
      .hf_model_types = {"llama"},
  };
  return info;
}

}  // namespace infera
