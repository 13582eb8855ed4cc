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

// Calibration: resuming forward passes part-way through. Blocks are numbered
// 2 l (layer l's attention) and 2 l + 1 (its FFN); each reads and updates
// the residual stream x [T, n_embd], so a pass can start at block b from the
// stream a pass with the same tokens and the same weights before b left at
// b's input. Not set while serving; only a runner that holds the whole model
// (not split over ranks) calls it.
class ResidualTap {
 public:
  virtual ~ResidualTap() = default;
  // Once per forward pass, after the embedding: x [rows, width] holds the
  // embedded tokens. Returns the block to start at: 0 (every block), or b in
  // (0, 2 n_layer] (2 n_layer: only the final norm and the output) after
  // writing block b's input into x.
  virtual int ResumeAt(float* x, int64_t rows, int64_t width) = 0;
  // Asked after ResumeAt: the block to stop before. A pass that stops before
  // 2 n_layer computes no logits (they are zeros): for passes that only show
  // activations to an observer.
  virtual int StopBefore() const = 0;
  // x [rows, width] at the input of block b, for every block that runs
  // (b = 2 n_layer: after the last layer). Called on the thread that runs
  // Forward, between the pool's jobs.
  virtual void BlockInput(int b, const float* x, int64_t rows, int64_t width) = 0;
};

}  // namespace infera
