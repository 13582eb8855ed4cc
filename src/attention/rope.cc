#include "attention/rope.h"

#include <cmath>

namespace infera {

Rope::Rope(int rope_dim, float theta, float linear_factor, const std::vector<float>& freq_factors, RopeStyle style)
    : rope_dim_(rope_dim), style_(style) {
  const int half = rope_dim / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
    if (!freq_factors.empty()) f /= freq_factors[i];
    if (linear_factor != 1.0f) f /= linear_factor;
    inv_freq_[i] = f;
  }
}

void Rope::Apply(float* x, int n_heads, int head_dim, int pos) const {
  const int half = rope_dim_ / 2;
  const bool pairs = style_ == RopeStyle::kNorm;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq_[i];
    const float cs = std::cos(angle), sn = std::sin(angle);
    const int a = pairs ? 2 * i : i;
    const int b = pairs ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + h * head_dim;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * cs - x1 * sn;
      xh[b] = x0 * sn + x1 * cs;
    }
  }
}

}  // namespace infera
