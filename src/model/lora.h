// LoRA adapters (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large
// Language Models"): a linear layer W [n_out, n_in] gains a low-rank update,
//   y = W x + scale · (alpha / r) · B (A x),   A [r, n_in], B [n_out, r],
// applied at run time on top of the (possibly quantized) base weights, so
// several adapters share one loaded model and each request picks its own
// scales (model/decoder.cc). Files: llama.cpp's GGUF adapters
// (general.type = adapter, adapter.type = lora, adapter.lora.alpha; tensors
// blk.N.<matrix>.weight.lora_a / .lora_b, as convert_lora_to_gguf.py writes
// them) and PEFT folders (adapter_config.json + adapter_model.safetensors,
// as Hugging Face's peft saves them; what vLLM loads). Targets: the
// attention's q, k, v, o and the dense FFN's gate, up, down matrices.
//
// Immutable once loaded; shared by the engine's runners across threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infera/status.h"
#include "kernels/kernels.h"
#include "model/model.h"

namespace infera {

enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kLoraTargets = 7;
const char* LoraTargetName(LoraTarget t);  // GGUF's: "attn_q", ..., "ffn_down"

// One matrix's update: A [r, n_in] and B [n_out, r] as WeightMatrix views
// of their own buffers (F16 / BF16 as the file stores them, else f32: the
// update is read per token, so its bytes matter as the weights' do), and
// alpha / r.
struct LoraPair {
  std::vector<uint8_t> a_data, b_data;
  WeightMatrix a, b;
  float alpha_over_rank = 1.0f;
  int32_t rank() const { return static_cast<int32_t>(a.n_out); }
};

struct LoraAdapter {
  std::string name;  // what requests and listings call it
  std::string path;
  float alpha = 0;             // 0: none given (alpha / r taken as 1, as llama.cpp does)
  float default_scale = 1.0f;  // used by requests that set no scales
  // [n_layer][kLoraTargets]; null where the adapter leaves a matrix alone.
  std::vector<std::array<std::unique_ptr<LoraPair>, kLoraTargets>> layers;
  int32_t max_rank = 0;
  int64_t n_params = 0;
  uint64_t bytes = 0;  // of every A and B held
  const LoraPair* Find(int layer, LoraTarget t) const {
    return layer < static_cast<int>(layers.size()) ? layers[layer][static_cast<int>(t)].get() : nullptr;
  }
};

// Loads the adapter at `path` (a .gguf file, or a PEFT folder / its
// adapter_config.json) for `model`, checking every matrix's shape against
// the model's. Errors name the file and what is wrong (another
// architecture, an unsupported target such as embeddings or MoE experts, a
// quantized LoRA tensor, a shape mismatch). A model split over ranks is
// refused.
StatusOr<std::unique_ptr<LoraAdapter>> LoadLoraAdapter(const std::string& path, const Model& model);

}  // namespace infera
