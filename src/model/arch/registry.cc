#include "model/arch/registry.h"

#include <algorithm>

namespace infera {

const std::vector<const ArchInfo*>& AllArchs() {
  // Adding a family: its file in this folder and one entry here.
  static const std::vector<const ArchInfo*> all = {&LlamaArch(),   &MistralArch(), &Qwen2Arch(),
                                                   &Qwen3Arch(),   &GraniteArch(), &Phi3Arch(),
                                                   &Gemma2Arch(),  &Gemma3Arch(),  &Olmo2Arch(),
                                                   &MixtralArch(), &Qwen2MoeArch(), &Qwen3MoeArch()};
  return all;
}

// The block shape a family implies (everything the files do not spell out).
void ApplyArchShape(const ArchInfo& info, ModelConfig* c) {
  c->arch = info.arch;
  c->rope_style = info.rope_style;
  c->qkv_bias = info.qkv_bias;
  c->qk_norm = info.qk_norm;
  c->fused_qkv = c->fused_gate_up = info.fused;
  c->pre_norm = info.pre_norm;
  c->post_norm = info.post_norm;
  c->activation = info.activation;
  c->embed_scale_sqrt_dim = info.embed_scale_sqrt_dim;
  c->swa_period = info.swa_period;
  c->rope_theta_swa = info.rope_theta_swa;
  c->expert_weights_norm = info.expert_weights_norm;
}

const ArchInfo& GetArch(Arch arch) {
  for (const ArchInfo* a : AllArchs()) {
    if (a->arch == arch) return *a;
  }
  return LlamaArch();  // every Arch value has an entry (registry_test checks)
}

const ArchInfo* FindArchByGguf(const std::string& name) {
  for (const ArchInfo* a : AllArchs()) {
    if (name == a->name) return a;
  }
  return nullptr;
}

const ArchInfo* FindArchByHf(const std::string& key) {
  for (const ArchInfo* a : AllArchs()) {
    const auto& archs = a->hf_architectures;
    const auto& types = a->hf_model_types;
    if (std::find(archs.begin(), archs.end(), key) != archs.end() ||
        std::find(types.begin(), types.end(), key) != types.end()) {
      return a;
    }
  }
  return nullptr;
}

std::string SupportedArchNames() {
  std::string out;
  for (const ArchInfo* a : AllArchs()) out += (out.empty() ? "" : ", ") + std::string(a->name);
  return out;
}

}  // namespace infera
