// Phi-3 / Phi-3.5 mini (dense): Llama's blocks with Q, K and V in one
// tensor (attn_qkv, HF qkv_proj) and gate and up in one (ffn_up of 2 n_ff
// rows, gate first; HF gate_up_proj), rotary embedding over halves (NEOX),
// a sliding window from the config. (LongRoPE, the 128k variants'
// rope_factors_long/short, is refused for now.)
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Phi3Arch() {
  static const ArchInfo info{Arch::kPhi3,
                             "phi3",
                             "phi3",
                             {"Phi3ForCausalLM"},
                             {"phi3"},
                             RopeStyle::kNeox,
                             /*qkv_bias=*/false,
                             /*qk_norm=*/false,
                             /*fused=*/true,
                             ArchInfo::HfSlidingWindow::kAlways};
  return info;
}

}  // namespace infera
