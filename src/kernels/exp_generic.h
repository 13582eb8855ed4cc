// exp and the gated activations built on it, in the defining scalar form
// every ISA reproduces bit for bit: plain element-wise arithmetic with
// explicit FMAs and no branch, so a compiler vectorizes a loop of it with
// the ISA's flags and still computes the same bits (no libm call, whose
// results and speed differ between builds).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace infera {
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags (one shared inline copy could be an AVX-512 one run on any CPU).
namespace {

// exp(x) for x in [-87, 88], to about 2 ulp: x = n ln2 + r with
// |r| <= ln2/2, a degree-6 polynomial for e^r, then 2^n from the exponent
// bits. Plain element-wise arithmetic with explicit FMAs and no branch, so a
// compiler vectorizes a loop of it and every ISA still computes the same
// bits.
inline float ExpInRange(float x) {
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693145751953125f, x);  // ln2 split in two for accuracy
  r = std::fma(n, -1.428606765330187045e-06f, r);
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<int32_t>(n) << 23;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// exp(x) for x <= 0 (softmax arguments): 0 below -87 (and for -inf); the
// cut-off is a select. (std::max(-87, x) is -87 for a NaN x, so the float to
// int conversion in ExpInRange never sees a NaN, which is undefined.)
inline float ExpNonPositive(float x_in) {
  const float out = ExpInRange(std::max(-87.0f, x_in));
  return x_in > -87.0f ? out : 0.0f;
}

// exp(x) for any x: 0 below -87, +inf above 88 (and for +inf), NaN gives 0.
inline float ExpClamped(float x_in) {
  float out = ExpInRange(std::min(88.0f, std::max(-87.0f, x_in)));  // (NaN -> -87, as above)
  out = x_in > 88.0f ? INFINITY : out;
  return x_in > -87.0f ? out : 0.0f;
}

// tanh(y), within about 10 ulp: y + y^3 P(y^2) (Taylor to y^11) for
// |y| < 0.3, else sign(y) (1 - 2 / (exp(2|y|) + 1)); both are computed and
// one selected, so a loop of it vectorizes. NaN stays NaN.
inline float TanhDefined(float y) {
  const float a = std::fabs(y), y2 = y * y;
  float p = -1382.0f / 155925.0f;
  p = std::fma(p, y2, 62.0f / 2835.0f);
  p = std::fma(p, y2, -17.0f / 315.0f);
  p = std::fma(p, y2, 2.0f / 15.0f);
  p = std::fma(p, y2, -1.0f / 3.0f);
  const float small = std::fma(p * y2, y, y);
  const float big = std::copysign(1.0f - 2.0f / (ExpClamped(2.0f * a) + 1.0f), y);
  const float t = a < 0.3f ? small : big;
  return y == y ? t : y;
}

// g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] (SiluMulFn).
inline void SiluMulGeneric(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + ExpClamped(-g[i])) * u[i];
}

// softcap * tanh(s / softcap) for softcap > 0, else s (Gemma 2's soft-caps
// of attention scores and of the final logits).
inline float SoftCap(float s, float softcap) { return softcap > 0 ? softcap * TanhDefined(s / softcap) : s; }

// x[i] = SoftCap(x[i], cap) (the final logits).
inline void SoftCapGeneric(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = SoftCap(x[i], cap);
}

// g[i] = gelu_tanh(g[i]) * u[i] (GeluTanhMulFn), GELU's tanh approximation
// 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), computed as the
// identical x / (1 + exp(-2z)): one exp and a division, like SiLU.
inline void GeluTanhMulGeneric(float* g, const float* u, int64_t n) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float z2 = kTwoSqrt2OverPi * std::fma(0.044715f * x, x * x, x);
    g[i] = x / (1.0f + ExpClamped(-z2)) * u[i];
  }
}

}  // namespace
}  // namespace infera
