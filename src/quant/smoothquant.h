// SmoothQuant (Xiao et al., 2023): per-input-channel smoothing factors that
// move the difficulty of quantizing activation outliers into the weights.
// For the matrices W_i [rows_i, cols] that read one input x [cols]:
//   s_j = max|x_j|^alpha / max_i,r |W_i[r, j]|^(1 - alpha)
// (the activation maximum over calibration tokens; both maxima clamped below
// at 1e-5, as the paper's code does, and s_j = 1 for a channel no token
// used). Then x / s feeds W diag(s): the same product in exact arithmetic,
// with the division folded into whatever produces x (an RMSNorm weight, or
// the rows of the matrix before), so the model stays a plain GGUF.
// alpha = 0.5 balances the two; larger moves more into the weights.
// Pure math; no model knowledge.
#pragma once

#include <cstdint>
#include <vector>

namespace infera {

struct SmoothMatrix {
  const float* w = nullptr;  // [rows, cols] row-major
  int64_t rows = 0;
};

// act_abs_max [cols] -> s [cols].
std::vector<float> SmoothQuantScales(const std::vector<float>& act_abs_max, const std::vector<SmoothMatrix>& mats,
                                     int64_t cols, double alpha);

}  // namespace infera
