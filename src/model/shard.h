// How a model is split across ranks: tensor parallel (T ranks share every
// layer of a stage — attention by KV-head groups, the FFN by columns, the
// output by vocabulary rows) and pipeline parallel (P stages, each a
// contiguous range of layers). World rank = pp_rank * T + tp_rank.
//
// A rank's shard is an ordinary Model whose config has the rank's per-layer
// head counts and FFN widths (0 for other stages' layers), so the decoder,
// KV storage and kernels run it unchanged; the ShardSpec tells the decoder
// where to communicate and BuildWeights which slices to load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infera/status.h"
#include "model/config.h"
#include "model/tensor_schema.h"
#include "model/weights.h"

namespace infera {

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The split a user asks for (--tp, --pp, --pp-layers).
struct ParallelLayout {
  int tp = 1;
  int pp = 1;
  std::vector<int> pp_layers;  // layers per stage [pp]; empty: as even as possible
  int world_size() const { return tp * pp; }
};

struct ShardSpec {
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;
  // Every stage's first layer [pp_size + 1] (the last entry is n_layer).
  std::vector<int> stage_begin;
  // Per layer [n_layer] (meaningful for this stage's layers): the global
  // ranges this rank holds — heads for q/kv, columns for the FFN widths.
  std::vector<IndexRange> q_heads, kv_heads, ff, ff_exp, ff_shexp;
  // Per layer: the attention output matrix is whole on every rank (its
  // quantization blocks straddle the rank's columns); the ranks then gather
  // the attention outputs instead of summing partial products.
  std::vector<bool> wo_whole;
  IndexRange vocab;  // output rows (vocabulary-parallel logits)

  bool split() const { return tp_size > 1 || pp_size > 1; }
  int world_rank() const { return pp_rank * tp_size + tp_rank; }
  int layer_begin() const { return stage_begin.empty() ? 0 : stage_begin[pp_rank]; }
  int layer_end() const { return stage_begin.empty() ? 0 : stage_begin[pp_rank + 1]; }
  bool OwnsLayer(int l) const { return l >= layer_begin() && l < layer_end(); }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  // The range of dimension d of `layer`'s tensors this rank holds (the whole
  // dimension when it is not split; kVocab is whole here: only the output
  // matrix is split by vocabulary, see `vocab`).
  IndexRange DimRange(const ModelConfig& c, Dim d, int layer) const;
};

// Checks `layout` against the model and plans world rank `rank`'s shard.
// `lookup` gives the tensors' types (quantization blocks must not straddle
// ranks). InvalidArgument with a message a user can act on when the model
// cannot be split that way.
StatusOr<ShardSpec> PlanShard(const ModelConfig& c, const TensorLookup& lookup, const ParallelLayout& layout,
                              int rank);

// The config a shard runs with: the rank's own head counts and widths per
// layer (0 for other stages' layers); everything else as in `c`.
ModelConfig ShardConfig(const ModelConfig& c, const ShardSpec& s);

// One line per stage and rank: "stage 0 (layers 0-2): tp rank 0 heads 0-3 kv 0-1 ff 0-383 vocab 0-2047".
std::string DescribeShard(const ModelConfig& c, const ShardSpec& s);

}  // namespace infera
