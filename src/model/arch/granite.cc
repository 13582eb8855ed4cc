// IBM Granite 3.x (dense): Llama's blocks and tensors with four scalar
// multipliers (GGUF granite.embedding_scale, .residual_scale,
// .attention.scale, .logit_scale; HF embedding_multiplier,
// residual_multiplier, attention_multiplier, logits_scaling), read into
// ModelConfig by the config readers.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& GraniteArch() {
  static const ArchInfo info{Arch::kGranite,
                             "granite",
                             "granite",
                             {"GraniteForCausalLM"},
                             {"granite"},
                             RopeStyle::kNorm,
                             /*qkv_bias=*/false,
                             /*qk_norm=*/false,
                             /*fused=*/false,
                             ArchInfo::HfSlidingWindow::kNever};
  return info;
}

}  // namespace infera
