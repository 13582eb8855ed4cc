// IBM Granite 3.x (dense): Llama's blocks and tensors with four scalar
// multipliers (GGUF granite.embedding_scale, .residual_scale,
// .attention.scale, .logit_scale; HF embedding_multiplier,
// residual_multiplier, attention_multiplier, logits_scaling), read into
// ModelConfig by the config readers.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& GraniteArch() {
  static const ArchInfo info{
      .arch = Arch::kGranite,
      .name = "granite",
      .hf_architectures = {"GraniteForCausalLM"},
      .hf_model_types = {"granite"},
  };
  return info;
}

}  // namespace infera
