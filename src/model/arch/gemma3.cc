// Gemma 3 (text): Gemma 2's blocks without soft-capping and with a per-head
// RMSNorm of Q and K before RoPE ((1 + w) like every Gemma norm); five
// sliding-window layers (512-1024) to one global layer, local layers with
// RoPE base 10k (HF rope_local_base_freq) and global ones with rope_theta
// (1M) and the config's linear scaling. HF: Gemma3ForCausalLM
// ("gemma3_text"), and the language model of the multimodal
// Gemma3ForConditionalGeneration checkpoints (4B, 12B, 27B): their
// text_config leaves out whatever equals Gemma3TextConfig's defaults.
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
      .hf_multimodal_architectures = {"Gemma3ForConditionalGeneration"},
      .hf_text_config_defaults = R"({"model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2304,
          "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
          "rope_theta": 1000000.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
          "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6})",
  };
  return info;
}

}  // namespace infera
