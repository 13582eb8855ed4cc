// Reduce16's summation order (kernels.h) in AVX-512 registers. Included only
// by files compiled with AVX-512 flags.
#pragma once

#include <immintrin.h>

namespace infera::avx512 {
namespace {

// Lanes i + i+8, then + i+4, then (0+2)+(1+3).
inline float Sum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

}  // namespace
}  // namespace infera::avx512
