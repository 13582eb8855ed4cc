#include "quant/smoothquant.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace infera {

std::vector<float> SmoothQuantScales(const std::vector<float>& act_abs_max, const std::vector<SmoothMatrix>& mats,
                                     int64_t cols, double alpha) {
  CHECK(static_cast<int64_t>(act_abs_max.size()) == cols);
  CHECK(alpha >= 0 && alpha <= 1);
  std::vector<float> w_max(cols, 0.0f);
  for (const SmoothMatrix& m : mats) {
    for (int64_t r = 0; r < m.rows; ++r) {
      const float* wr = m.w + r * cols;
      for (int64_t j = 0; j < cols; ++j) w_max[j] = std::max(w_max[j], std::fabs(wr[j]));
    }
  }
  constexpr double kFloor = 1e-5;
  std::vector<float> s(cols, 1.0f);
  for (int64_t j = 0; j < cols; ++j) {
    if (!(act_abs_max[j] > 0)) continue;  // never active (or not finite): leave it
    const double a = std::max<double>(act_abs_max[j], kFloor), w = std::max<double>(w_max[j], kFloor);
    s[j] = static_cast<float>(std::max(std::pow(a, alpha) / std::pow(w, 1.0 - alpha), kFloor));
  }
  return s;
}

}  // namespace infera
