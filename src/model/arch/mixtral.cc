// Mixtral 8x7B / 8x22B: Mistral's attention with a sparse MoE FFN — a
// router (HF block_sparse_moe.gate) picks 2 of 8 SwiGLU experts per token,
// weighted by the softmax of their router logits. HF keeps each expert's
// w1 (gate), w3 (up) and w2 (down) apart; GGUF stacks them into 3-D
// ffn_gate_exps / ffn_up_exps / ffn_down_exps. llama.cpp writes these models
// as "llama" with llama.expert_count.
#include "model/arch/registry.h"

namespace infera {

const ArchInfo& MixtralArch() {
  static const ArchInfo info{
      .arch = Arch::kMixtral,
      .name = "mixtral",
      .gguf_write = "llama",
      .hf_architectures = {"MixtralForCausalLM"},
      .hf_model_types = {"mixtral"},
      .hf_sliding_window = ArchInfo::HfSlidingWindow::kAlways,
      .hf_tensor_names = {{"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
                          {"ffn_gate_exps.weight", "block_sparse_moe.experts.{e}.w1.weight"},
                          {"ffn_up_exps.weight", "block_sparse_moe.experts.{e}.w3.weight"},
                          {"ffn_down_exps.weight", "block_sparse_moe.experts.{e}.w2.weight"}},
  };
  return info;
}

}  // namespace infera
