// AWQ (Lin et al., 2023), activation-aware scaling: a per-input-channel
// scale s multiplies the weight columns (W diag(s)) before rounding and is
// divided out of the input (x / s) — folded into the preceding RMSNorm
// weight or linear rows, so the model stays a plain GGUF and its F32 output
// is unchanged — and s = a^alpha (a_j: the RMS of input channel j over the
// calibration tokens, normalized so that sqrt(max s * min s) = 1) with alpha
// on a grid picked to minimize the rounding's effect on the layer outputs,
//   sum_i tr(dW_i H dW_i^T),  dW_i = Q(W_i diag(s)) diag(s)^-1 - W_i,
// over the matrices that share the input (H = sum x x^T; Q = round to
// nearest in the matrix's type). alpha = 0 (s = 1) is plain rounding, so the
// result is never worse on the calibration data. (The paper uses mean |x|;
// the RMS comes from the same statistics as GPTQ's Hessian.)
// Pure math; no model knowledge.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/status.h"
#include "tensor/dtype.h"

namespace infera {

struct AwqMatrix {
  const float* w = nullptr;  // [rows, cols] row-major
  int64_t rows = 0;
  DType type = DType::kQ4_0;  // what it will be stored in
};

struct AwqResult {
  std::vector<float> scales;  // s [cols]
  double alpha = 0;
  double loss = 0;        // at the chosen alpha
  double loss_plain = 0;  // alpha = 0: plain rounding
};

// h [cols, cols]; n_grid alphas 0, 1/n_grid, ..., (n_grid-1)/n_grid.
StatusOr<AwqResult> AwqSearch(const std::vector<AwqMatrix>& mats, const std::vector<double>& h, int64_t cols,
                              int n_grid = 20, int threads = 1);

}  // namespace infera
