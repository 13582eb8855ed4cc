#include "prune/input_stats.h"

#include <algorithm>
#include <cmath>

#include "base/linalg.h"

namespace infera::prune {

InputStats::InputStats(int64_t width, bool with_hessian)
    : width_(width), sq_norm_(width, 0.0), abs_max_(width, 0.0f), upper_(with_hessian ? width * width : 0, 0.0) {}

void InputStats::Add(const float* x, int64_t rows) {
  const int64_t n = width_;
  for (int64_t t = 0; t < rows; ++t) {
    const float* xt = x + t * n;
    for (int64_t j = 0; j < n; ++j) {
      const double v = xt[j];
      sq_norm_[j] += v * v;
      abs_max_[j] = std::max(abs_max_[j], std::fabs(xt[j]));
    }
  }
  if (!upper_.empty()) AddGramUpper(x, rows, n, upper_.data());
  tokens_ += rows;
}

std::vector<double> InputStats::hessian() const {
  if (upper_.empty()) return {};
  const int64_t n = width_;
  std::vector<double> h = upper_;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) h[i * n + j] = h[j * n + i];
  }
  return h;
}

}  // namespace infera::prune
