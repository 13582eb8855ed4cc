// exp_generic.h's exp and the gated activations built on it on 8 lanes,
// operation for operation those of the scalar definitions (GCC leaves those
// loops scalar with AVX2 flags: their selects have no mask registers here).
// Included only by files compiled with AVX2 and FMA flags.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/exp_generic.h"

namespace infera::avx2 {
namespace {

// ExpInRange: x = n ln2 + r, a degree-6 polynomial for e^r, 2^n from the
// exponent bits.
inline __m256 ExpInRange8(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23));
  return _mm256_castsi256_ps(bits);
}

// ExpNonPositive: 0 below -87, for -inf and NaN (VMAXPS returns its second
// operand, -87, for a NaN first one, as std::max(-87, x) does).
inline __m256 ExpNonPositive8(__m256 x_in) {
  const __m256 lim = _mm256_set1_ps(-87.0f);
  const __m256 out = ExpInRange8(_mm256_max_ps(x_in, lim));
  return _mm256_and_ps(_mm256_cmp_ps(x_in, lim, _CMP_GT_OQ), out);
}

// ExpClamped: 0 below -87 (and NaN), +inf above 88.
inline __m256 ExpClamped8(__m256 x_in) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  __m256 out = ExpInRange8(_mm256_min_ps(_mm256_max_ps(x_in, lo), hi));
  out = _mm256_blendv_ps(out, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x_in, hi, _CMP_GT_OQ));
  return _mm256_and_ps(_mm256_cmp_ps(x_in, lo, _CMP_GT_OQ), out);
}

// TanhDefined: y + y^3 P(y^2) for |y| < 0.3, else sign(y) (1 - 2 /
// (ExpClamped(2|y|) + 1)); NaN stays NaN.
inline __m256 Tanh8(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, y), y2 = _mm256_mul_ps(y, y);
  __m256 p = _mm256_set1_ps(-1382.0f / 155925.0f);
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, y2), y, y);
  const __m256 e = ExpClamped8(_mm256_mul_ps(_mm256_set1_ps(2.0f), a));
  const __m256 mag =
      _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 big = _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, y));  // copysign
  const __m256 t = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.3f), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, t, _mm256_cmp_ps(y, y, _CMP_EQ_OQ));
}

// SoftCap for cap > 0: cap * Tanh(s / cap).
inline __m256 SoftCap8(__m256 s, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  return _mm256_mul_ps(c, Tanh8(_mm256_div_ps(s, c)));
}

// SoftCapGeneric: x = SoftCap(x, cap).
inline void SoftCapInPlace8(float* x, int64_t n, float cap) {
  if (!(cap > 0)) return;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, SoftCap8(_mm256_loadu_ps(x + i), cap));
  SoftCapGeneric(x + i, n - i, cap);
}

// SiluMulGeneric: g = g / (1 + ExpClamped(-g)) * u.
inline void SiluMul8(float* g, const float* u, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 e = ExpClamped8(_mm256_xor_ps(x, sign));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  SiluMulGeneric(g + i, u + i, n - i);
}

// GeluTanhMulGeneric: z2 = 2 sqrt(2/pi) fma(0.044715 x, x x, x), g = x /
// (1 + ExpClamped(-z2)) * u.
inline void GeluTanhMul8(float* g, const float* u, int64_t n) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 z = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), _mm256_mul_ps(x, x), x);
    const __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(kTwoSqrt2OverPi), z);
    const __m256 e = ExpClamped8(_mm256_xor_ps(z2, sign));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  GeluTanhMulGeneric(g + i, u + i, n - i);
}

}  // namespace
}  // namespace infera::avx2
