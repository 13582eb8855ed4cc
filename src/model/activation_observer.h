// Calibration hooks: the decoder shows an observer the input of every linear
// layer it runs (pruning's Wanda norms and SparseGPT Hessians, importance
// for structured pruning). Not set while serving.
#pragma once

#include <cstdint>

namespace infera {

// Which matrices read an input (one input may feed several).
enum class LinearInput {
  kAttnIn,    // wq, wk, wv (attn_qkv): [T, n_embd]
  kAttnOut,   // wo: the attention output [T, q_dim of the layer]
  kFfnIn,     // w_gate, w_up; the router and experts' gate / up: [T, n_embd]
  kFfnMid,    // w_down: act(gate) * up [T, n_ff of the layer]
  kExpertIn,  // an expert's gate / up: [tokens routed to it, n_embd]
  kExpertMid, // an expert's down: [tokens routed to it, n_ff_exp]
  kSharedMid, // the shared expert's down: [T, n_ff_shexp]
};

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // Whether Observe wants this layer's inputs (others are not shown).
  virtual bool Wants(int layer) const = 0;
  // x [rows, width], row-major; expert: the expert's index (kExpert*), else
  // -1. Called on the thread that runs Forward, between the pool's jobs.
  virtual void Observe(int layer, LinearInput which, int expert, const float* x, int64_t rows, int64_t width) = 0;
};

}  // namespace infera
