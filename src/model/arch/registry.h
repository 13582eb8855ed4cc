// The architecture registry: what infera knows about each model family, as
// data. Every family has one file here (llama.cc, mistral.cc, qwen2.cc)
// defining its ArchInfo — the names it goes by in GGUF and Hugging Face
// files and how it differs from the Llama baseline — and one line in
// registry.cc's list. Config readers, GGUF writers, `info` and error messages
// look families up here instead of naming them in code.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace infera {

struct ArchInfo {
  Arch arch;
  const char* name;        // infera's name, also general.architecture when reading
  const char* gguf_write;  // general.architecture this family is written as (mistral: "llama")
  std::vector<std::string> hf_architectures;  // config.json "architectures", e.g. "LlamaForCausalLM"
  std::vector<std::string> hf_model_types;    // config.json "model_type"
  RopeStyle rope_style;    // in infera's (GGUF's) layout; HF Q/K rows are permuted into it
  bool qkv_bias;           // always has q/k/v biases (else: HF "attention_bias")
  bool qk_norm;            // RMSNorm over each head of Q and K before RoPE
  bool fused;              // Q/K/V and gate/up stored fused (attn_qkv, ffn_up of 2 n_ff rows)
  // How an HF config's sliding_window applies: never (llama), always
  // (mistral), or only with "use_sliding_window": true (qwen2).
  enum class HfSlidingWindow { kNever, kAlways, kIfUseSlidingWindow } hf_sliding_window;
};

// One per family (each family's file).
const ArchInfo& LlamaArch();
const ArchInfo& MistralArch();
const ArchInfo& Qwen2Arch();
const ArchInfo& Qwen3Arch();
const ArchInfo& GraniteArch();
const ArchInfo& Phi3Arch();

// Every family, in a fixed order.
const std::vector<const ArchInfo*>& AllArchs();
const ArchInfo& GetArch(Arch arch);
// By general.architecture / HF architectures entry / HF model_type; null if unknown.
const ArchInfo* FindArchByGguf(const std::string& name);
const ArchInfo* FindArchByHf(const std::string& architecture_or_model_type);
// "llama, mistral, qwen2" for messages.
std::string SupportedArchNames();

}  // namespace infera
