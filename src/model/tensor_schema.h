// The tensor schema of the decoder: one row per tensor role, naming it once
// for every place that needs its name — GGUF name, Hugging Face name, shape
// (from the config), when it is present, how HF rows are permuted, and the
// ModelWeights member it fills. Weight loading (GGUF, HF, llama2.c), GGUF
// writing (convert, quantize), random models and the type summary all walk
// this table; no tensor name is written anywhere else.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace infera {

// A dimension of a tensor, resolved against a config by DimSize().
enum class Dim { kEmbd, kVocab, kQ, kKv, kFf, kHead, kRopeHalf, kExpert, kFfExp, kFfShexp };

// When a role has a tensor.
enum class Presence {
  kAlways,
  kUntied,    // output.weight: unless the embeddings are tied
  kQkvBias,   // config.qkv_bias
  kQkNormHead,  // config.qk_norm == kPerHead
  kQkNormFull,  // config.qk_norm == kFull
  kPreNorm,   // config.pre_norm (attn_norm, ffn_norm)
  kPostNorm,  // config.post_norm (post_attention_norm, post_ffw_norm)
  kSplitQkv,  // separate attn_q/k/v: unless config.fused_qkv
  kFusedQkv,  // attn_qkv: config.fused_qkv
  kSplitGateUp,  // separate ffn_gate/ffn_up: dense, unless config.fused_gate_up
  kFusedGateUp,  // ffn_up holding gate and up: dense and config.fused_gate_up
  kDenseFfn,  // ffn_down: no experts
  kMoe,       // router and expert tensors: config.n_expert > 0
  kSharedExpert,  // config.n_ff_shexp > 0
  kOptional,  // may be absent (rope_freqs.weight)
};

// HF checkpoints keep Q/K rows in the "halves" rotary layout; the GGUF layout
// (and infera's) interleaves pairs. Rows are permuted per head at load.
enum class Permute { kNone, kQHeads, kKvHeads };

// What a random-weight model puts in the tensor.
enum class Init { kNormal, kOnes, kZeros };

// One part of a fused tensor: `rows` consecutive rows that become `dest`.
struct FusedPart {
  WeightMatrix LayerWeights::*dest;
  Dim rows;
};

struct TensorRole {
  const char* gguf;  // "token_embd.weight", or "attn_q.weight" for "blk.N.attn_q.weight"
  const char* hf;    // "model.embed_tokens.weight", or "self_attn.q_proj.weight" for "model.layers.N.…"
  bool per_layer;
  Dim n_in;          // matrices: [n_out, n_in] row-major (GGUF ne = {n_in, n_out}); vectors: [n_in]
  Dim n_out;         // unused for vectors
  bool matrix;
  Presence presence;
  Permute permute;
  Init init;
  // Exactly one of these is set: where the tensor goes.
  WeightMatrix ModelWeights::*model_matrix;
  std::vector<float> ModelWeights::*model_vector;
  WeightMatrix LayerWeights::*layer_matrix;
  std::vector<float> LayerWeights::*layer_vector;
  // A fused layer matrix (layer_matrix null): its parts, in row order; its
  // n_out is the sum of their rows. Loading makes each part a view of the
  // tensor's rows (nothing copied).
  std::vector<FusedPart> parts;
  // An RMSNorm weight (Gemma's HF files store it minus one).
  bool norm = false;
  // MoE experts (layer_matrix null): one [n_out, n_in] matrix per expert,
  // stacked in GGUF as a 3-D tensor ne = {n_in, n_out, n_expert}; HF names
  // each expert apart, "{e}" in `hf` standing for its index. Loading makes
  // each expert a view of its slice.
  std::vector<WeightMatrix> LayerWeights::*layer_experts = nullptr;
  // Older GGUF files (llama.cpp before April 2024: the first Mixtral GGUFs)
  // keep each expert in its own 2-D tensor, "{e}" standing for its index
  // ("ffn_gate.{e}.weight"); read when the stacked tensor is absent.
  const char* gguf_per_expert = nullptr;
};

// Whether a role holds stacked experts.
inline bool IsExpertRole(const TensorRole& r) { return r.layer_experts != nullptr; }

// The roles of the Llama-family decoder (llama, mistral, qwen2, qwen3), in GGUF
// file order: globals first, then the roles of each layer.
const std::vector<TensorRole>& DecoderTensorRoles();

// A dimension's size in layer `layer` (-1: global tensors; per-layer widths
// take the layer's).
int64_t DimSize(const ModelConfig& c, Dim d, int layer = -1);
// Whether `role` has a tensor in a model with config `c` (kOptional: true).
bool RoleIsPresent(const TensorRole& role, const ModelConfig& c);

// The GGUF name of a global matrix ("output.weight" for &ModelWeights::output).
std::string GlobalTensorName(WeightMatrix ModelWeights::*member);

// Full names of a role's tensor for layer `layer` (ignored for globals);
// the HF name as the family of `c` spells it ("" if it has none).
std::string GgufTensorName(const TensorRole& role, int layer);
// The older per-expert GGUF name of expert `e` of an expert role
// ("blk.3.ffn_gate.5.weight"; "" if the role has none).
std::string GgufExpertTensorName(const TensorRole& role, int layer, int e);
std::string HfTensorName(const TensorRole& role, int layer, const ModelConfig& c);
// The HF name of the tensor a GGUF name stands for in a model with config
// `c` ("" if none).
std::string HfNameForGguf(const std::string& gguf_name, const ModelConfig& c);
// Rows of a role's matrix in `layer` (the sum of its parts' rows when fused).
int64_t RoleRows(const TensorRole& role, const ModelConfig& c, int layer = -1);
// The layer matrices a role fills: its own, its parts' or its experts'.
std::vector<WeightMatrix*> RoleLayerMatrices(const TensorRole& role, LayerWeights* layer);
std::vector<const WeightMatrix*> RoleLayerMatrices(const TensorRole& role, const LayerWeights& layer);

// Calls fn(role, layer) for every tensor of a model with config `c`, in file
// order (layer -1 for globals).
template <typename Fn>
void ForEachTensor(const ModelConfig& c, Fn&& fn) {
  const auto& roles = DecoderTensorRoles();
  for (const TensorRole& r : roles) {
    if (!r.per_layer && RoleIsPresent(r, c)) fn(r, -1);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    for (const TensorRole& r : roles) {
      if (r.per_layer && RoleIsPresent(r, c)) fn(r, l);
    }
  }
}

// The member a role fills in `w` (layer ignored for globals); null when the
// role is of the other kind.
WeightMatrix* RoleMatrix(const TensorRole& role, int layer, ModelWeights* w);
std::vector<float>* RoleVector(const TensorRole& role, int layer, ModelWeights* w);
const WeightMatrix* RoleMatrix(const TensorRole& role, int layer, const ModelWeights& w);
const std::vector<float>* RoleVector(const TensorRole& role, int layer, const ModelWeights& w);

}  // namespace infera
