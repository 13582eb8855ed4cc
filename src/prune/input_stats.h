// What pruning and quantization need to know about the inputs of one linear
// layer, over calibration tokens: per input channel the sum of squares
// (Wanda's ||x_j||^2), the largest |x_j| (SmoothQuant's activation scale) and,
// when asked for, the Gram matrix X^T X (SparseGPT's
// Hessian, up to a factor). Not thread-safe: one writer.
#pragma once

#include <cstdint>
#include <vector>

namespace infera::prune {

class InputStats {
 public:
  InputStats(int64_t width, bool with_hessian);
  // x [rows, width]: one calibration token per row.
  void Add(const float* x, int64_t rows);
  int64_t width() const { return width_; }
  int64_t tokens() const { return tokens_; }
  const std::vector<double>& sq_norm() const { return sq_norm_; }  // [width]
  const std::vector<float>& abs_max() const { return abs_max_; }   // [width]
  // [width, width], symmetric; empty unless asked for.
  std::vector<double> hessian() const;

 private:
  int64_t width_;
  int64_t tokens_ = 0;
  std::vector<double> sq_norm_;
  std::vector<float> abs_max_;
  std::vector<double> upper_;  // X^T X, the upper triangle filled
};

}  // namespace infera::prune
