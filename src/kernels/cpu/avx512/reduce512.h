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

// Lane a of the result = Sum(acc[a]), for 16 accumulators at once, with the
// same pairings (a transposing butterfly).
inline __m512 Sum16x16(const __m512* acc) {
  __m512 t[8], u[4], v[2];
  for (int j = 0; j < 8; ++j) {
    t[j] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[j], acc[j + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(acc[j], acc[j + 8], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Quarter q of u[j]: accumulator j + {0, 8, 4, 12}[q], lanes i + i+4.
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[j], t[j + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[j], t[j + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int j = 0; j < 2; ++j) {
    v[j] = _mm512_add_ps(_mm512_shuffle_ps(u[j], u[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[j], u[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane L of w holds accumulator {0,2,1,3, 8,10,9,11, 4,6,5,7, 12,14,13,15}[L]
  // (its own inverse).
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(order, w);
}

}  // namespace
}  // namespace infera::avx512
