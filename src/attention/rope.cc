#include "attention/rope.h"

#include <algorithm>
#include <cmath>

namespace infera {

float YarnDefaultMscale(float factor) { return factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f; }

namespace {
// The dim index whose frequency turns `rotations` times over `ctx` positions.
double YarnCorrectionDim(double rotations, int dim, double base, int ctx) {
  return dim * std::log(ctx / (rotations * 2 * M_PI)) / (2 * std::log(base));
}
}  // namespace

Rope::Rope(const RopeParams& p) : rope_dim_(p.rope_dim), style_(p.style), mscale_(p.mscale) {
  const int half = p.rope_dim / 2;
  inv_freq_.resize(half);
  double low = 0, high = 0;
  const bool yarn = p.yarn_factor > 1.0f && p.yarn_original_ctx > 0;
  if (yarn) {
    low = std::max(0.0, std::floor(YarnCorrectionDim(p.yarn_beta_fast, p.rope_dim, p.theta, p.yarn_original_ctx)));
    high = std::min(double(p.rope_dim - 1),
                    std::ceil(YarnCorrectionDim(p.yarn_beta_slow, p.rope_dim, p.theta, p.yarn_original_ctx)));
    if (high == low) high += 0.001;
  }
  for (int i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(p.theta, static_cast<float>(2 * i) / static_cast<float>(p.rope_dim));
    if (!p.freq_factors.empty()) f /= p.freq_factors[i];
    if (p.linear_factor != 1.0f) f /= p.linear_factor;
    if (yarn) {
      // 1 for the high frequencies (kept), 0 for the low ones (interpolated).
      const double keep = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
      f = static_cast<float>(f / p.yarn_factor * (1.0 - keep) + f * keep);
    }
    inv_freq_[i] = f;
  }
}

void Rope::Apply(float* x, int n_heads, int head_dim, int pos) const {
  const int half = rope_dim_ / 2;
  const bool pairs = style_ == RopeStyle::kNorm;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq_[i];
    float cs = std::cos(angle), sn = std::sin(angle);
    if (mscale_ != 1.0f) {
      cs *= mscale_;
      sn *= mscale_;
    }
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
