// Gemma 3 (text): Gemma 2's blocks without soft-capping and with a per-head
// RMSNorm of Q and K before RoPE ((1 + w) like every Gemma norm); five
// sliding-window layers (512-1024) to one global layer, local layers with
// RoPE base 10k (HF rope_local_base_freq) and global ones with rope_theta
// (1M) and the config's linear scaling. HF: Gemma3ForCausalLM
// ("gemma3_text").
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& Gemma3Arch() {
  static const ArchInfo info{
      .arch = Arch::kGemma3,
      .name = "gemma3",
      .hf_architectures = {"Gemma3ForCausalLM"},
      .hf_model_types = {"gemma3_text"},
      .rope_style = RopeStyle::kNeox,
      .qk_norm = QkNorm::kPerHead,
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kAlways,
      .post_norm = true,
      .activation = Activation::kGeluTanh,
      .embed_scale_sqrt_dim = true,
      .swa_period = 6,
      .rope_theta_swa = 10000.0f,
      .gguf_attention_scale = ArchInfo::GgufAttentionScale::kGemma,
      .hf_norm_plus_one = true,
      .hf_tensor_names = {{"ffn_norm.weight", "pre_feedforward_layernorm.weight"}},
  };
  return info;
}

}  // namespace infera
