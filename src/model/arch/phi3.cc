// Phi-3 / Phi-3.5 mini (dense): Llama's blocks with Q, K and V in one
// tensor (attn_qkv, HF qkv_proj) and gate and up in one (ffn_up of 2 n_ff
// rows, gate first; HF gate_up_proj), rotary embedding over halves (NEOX),
// a sliding window from the config. (LongRoPE, the 128k variants'
// rope_factors_long/short, is refused for now.)
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Phi3Arch() {
  static const ArchInfo info{
      .arch = Arch::kPhi3,
      .name = "phi3",
      .hf_architectures = {"Phi3ForCausalLM"},
      .hf_model_types = {"phi3"},
      .rope_style = RopeStyle::kNeox,
      .fused = true,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kAlways,
  };
  return info;
}

}  // namespace infera
