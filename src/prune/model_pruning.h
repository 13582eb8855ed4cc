// Pruning a loaded model: which matrices are prunable and what input each
// reads, making them editable f32 copies, and structured pruning (whole KV
// groups of attention heads, FFN channels) that writes a smaller dense
// model with per-layer widths.
//
// Not thread-safe: edits the model's weights in place; nothing may run the
// model meanwhile.
#pragma once

#include <string>
#include <vector>

#include "infera/status.h"
#include "model/activation_observer.h"
#include "model/model.h"

namespace infera::prune {

// One matrix of a layer that pruning may edit.
struct LayerMatrix {
  std::string name;    // GGUF tensor name; experts: "blk.3.ffn_down_exps.weight[5]"
  int layer = 0;
  LinearInput input = LinearInput::kAttnIn;  // what it multiplies
  int expert = -1;
  WeightMatrix* m = nullptr;  // into model.weights
};

// Every linear matrix of every layer (not the embeddings or the output), in
// file order; fused tensors (attn_qkv, phi3's ffn_up) as one entry per part.
std::vector<LayerMatrix> LayerMatrices(Model* model);

// Replaces every layer matrix by an f32 copy (dequantized) owned by the
// weights, so it can be edited in place; fused parts and experts stay views
// of one buffer per tensor (as the GGUF writer expects). Split models are
// refused.
Status MakeLayerMatricesF32(Model* model);

// Per layer: the KV heads, query heads and FFN channels to keep (sorted;
// empty: all). Every kept KV group keeps the same number of query heads, all
// of its own (GQA: query head h reads KV head h / group).
struct StructuredPlan {
  std::vector<std::vector<int>> kv_heads;  // [n_layer]
  std::vector<std::vector<int>> q_heads;   // [n_layer]
  std::vector<std::vector<int>> ff;        // [n_layer]
};

// Importance from calibration statistics (ss_attn_out[l] [q_dim of l] and
// ss_ffn_mid[l] [n_ff of l]: sums of squares of wo's and w_down's inputs;
// an empty vector: that structure is not pruned) and the weights:
// a query head scores sum over its dims d of ss[d] * ||wo[:, d]||^2, a KV
// group the sum over its query heads, a channel sqrt(ss[j]) *
// ||w_down[:, j]||. Heads: each layer keeps the most heads not above
// n_head - round(ratio * n_head) that GQA allows (whole groups, or the same
// number of query heads in every kept group; ties keep more KV groups), the
// best groups and within them the best heads. Channels: each layer loses
// round(ratio * n_ff) of the lowest; widths that are multiples of 32 stay so
// (the kept count rounded to one). At least one of each is kept.
StatusOr<StructuredPlan> PlanStructured(const Model& model, const std::vector<std::vector<double>>& ss_attn_out,
                                        const std::vector<std::vector<double>>& ss_ffn_mid, double head_ratio,
                                        double ff_ratio);

// Whether the architecture has the structure (heads: more than one KV head,
// separate Q/K/V, no whole-projection Q/K norm; FFN: dense, separate gate
// and up); the reason if not.
Status CheckStructuredSupported(const ModelConfig& c, bool heads, bool ffn);

// Slices the model to the plan: a smaller dense model whose config carries
// per-layer n_head / n_head_kv / n_ff. Layer matrices must be f32 (above).
Status ApplyStructured(Model* model, const StructuredPlan& plan);

// The same plan as zeros instead of removal (the pruned heads' wo columns
// and the pruned channels' w_down columns): the reference the sliced model
// must match. Layer matrices must be f32.
void ZeroStructured(Model* model, const StructuredPlan& plan);

}  // namespace infera::prune
