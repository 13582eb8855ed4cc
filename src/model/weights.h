// The weights of a Llama-family model, in infera's canonical layout (GGUF's:
// W [n_out, n_in] row-major, Q/K rows in the rotary pair order of
// config.rope_style). Matrices point into memory maps or into `owned`;
// norm and bias vectors are always converted to f32.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor_view.h"
#include "base/cpu_features.h"
#include "infera/status.h"
#include "kernels/kernels.h"
#include "model/config.h"

namespace infera {

struct ShardSpec;

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;            // [n_embd]; empty unless config.pre_norm
  std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd]; empty unless config.post_norm
  std::vector<float> bq, bk, bv;  // empty unless config.qkv_bias
  // [head_dim] (QkNorm::kPerHead) or [q_dim] / [kv_dim] (kFull); empty unless config.qk_norm
  std::vector<float> q_norm, k_norm;
  WeightMatrix wq, wk, wv, wo;
  WeightMatrix w_gate, w_up, w_down;  // dense FFN (empty for MoE)
  // Sparse MoE (config.n_expert > 0): router [n_expert, n_embd]; per expert
  // gate/up [n_ff_exp, n_embd] and down [n_embd, n_ff_exp], views of the
  // stacked tensors; the shared expert and its gate vector [n_embd].
  WeightMatrix router;
  std::vector<WeightMatrix> exp_gate, exp_up, exp_down;
  WeightMatrix sh_gate, sh_up, sh_down;
  std::vector<float> sh_gate_inp;
};

struct ModelWeights {
  WeightMatrix tok_embd;  // [n_vocab, n_embd]
  std::vector<float> output_norm;
  WeightMatrix output;    // [n_vocab, n_embd]; == tok_embd when tied
  std::vector<LayerWeights> layers;
  std::vector<float> rope_freq_factors;  // empty, or rope_dim/2 divisors
  std::vector<float> rope_factors_long, rope_factors_short;  // LongRoPE: empty, or rope_dim/2 divisors each
  std::deque<std::vector<uint8_t>> owned;  // buffers for converted tensors
  // W8A8 matrices' outlier columns (WeightMatrix::outliers points here).
  std::deque<OutlierColumns> outlier_columns;
  // Packed copies of the quantized matrices (WeightMatrix::packed points here).
  std::vector<std::unique_ptr<PackedMatrix>> packed;
  uint64_t packed_bytes = 0;
  uint64_t total_bytes = 0;                // bytes of all weight tensors
  uint64_t packed_source_bytes = 0;        // of those, the bytes the packed copies replace
  // Weight bytes resident while running: the packed copies plus every tensor
  // read as stored. (A token embedding is read only by the rows in use; when
  // it is also the packed output, those rows come back from the file.)
  uint64_t resident_bytes() const { return total_bytes - packed_source_bytes + packed_bytes; }
  // resident_bytes() / total_bytes.
  double resident_ratio() const {
    return static_cast<double>(resident_bytes()) / static_cast<double>(total_bytes > 0 ? total_bytes : 1);
  }
};

// Looks a tensor up by its GGUF name; null if absent.
using TensorLookup = std::function<const TensorView*(const std::string& gguf_name)>;

struct WeightLoadOptions {
  // HF checkpoints of llama/mistral keep Q/K rows in the "halves" rotary
  // layout; permute them into GGUF's pair layout while loading.
  bool permute_qk_from_hf = false;
  // Gemma's HF norm weights w mean (1 + w): add the one while loading.
  bool norm_plus_one = false;
  // Called with the bytes of each matrix once it is repacked for the integer
  // kernels (which then never read the original): a file mapping drops those
  // pages, so the weights are not resident twice. Called from the packing
  // threads, concurrently. May be empty.
  std::function<void(const uint8_t*, size_t)> release_source;
  // Load only this rank's slices (model/shard.h): its stage's layers, its
  // rows of column-parallel matrices (views), its columns of row-parallel
  // ones (copied), its vocabulary rows of the output. Null: everything.
  // Shapes are checked against the whole model's config.
  const ShardSpec* shard = nullptr;
  // The kernel ISA the packed matrices are for (ModelLoadOptions::kernel_isa).
  CpuIsa kernel_isa = CpuIsa::kAvx512;
};

StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& c, const TensorLookup& lookup,
                                                     const WeightLoadOptions& opts, const std::string& source);

// Row permutation of llama.cpp's converter: for each head, HF row
// (half * hd/2 + i) becomes GGUF row (2 * i + half). Works on any row size.
void PermuteRowsHfToGguf(const uint8_t* src, uint8_t* dst, int n_heads, int head_dim, size_t row_bytes);

// The companion tensors of a W8A8 matrix's outlier columns (OutlierColumns):
// for "blk.0.attn_q.weight", "blk.0.attn_q.outlier_cols" (i32 [k]) and
// "blk.0.attn_q.outlier_weight" (f16 [k, n_out]).
std::string OutlierColsTensorName(const std::string& weight_name);
std::string OutlierWeightTensorName(const std::string& weight_name);

// Converts a tensor of type F32/F16/BF16 to f32 values.
StatusOr<std::vector<float>> ToF32(const TensorView& t);

}  // namespace infera
