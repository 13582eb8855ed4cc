// The tiled attention kernels' softmax pieces on 8 lanes (AVX2), operation
// for operation those of the scalar definitions (flash_generic.h,
// flash_bf16_generic.h). Included only by files compiled with AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "kernels/kernels.h"

namespace infera::avx2 {
namespace {

constexpr int kStepVecs = kFlashStep / 8;  // 8-lane vectors of a step's 64 scores

// Reduce16's order (lanes i + i+8, then + i+4, then (0+2)+(1+3)) on lanes
// lo (0..7) and hi (8..15).
inline float Sum16(__m256 lo, __m256 hi) {
  const __m256 h = _mm256_add_ps(lo, hi);
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

// Reduce64 of a step's 64 lanes: (v_i + v_i+16) + (v_i+32 + v_i+48), then
// Reduce16.
inline float Sum64(const __m256* p) {
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(p[0], p[2]), _mm256_add_ps(p[4], p[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(p[1], p[3]), _mm256_add_ps(p[5], p[7]));
  return Sum16(lo, hi);
}

// The largest of a step's 64 scores, -inf for none; a NaN score is passed
// over (VMAXPS returns its second operand when either is NaN), as
// std::max(mx, s) does in the definitions. A max's value is the same in any
// order.
inline float Max64(const __m256* s) {
  __m256 v = _mm256_set1_ps(-INFINITY);
  for (int i = 0; i < kStepVecs; ++i) v = _mm256_max_ps(s[i], v);
  const __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 e = _mm_max_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_max_ss(e, _mm_movehdup_ps(e)));
}

// Lanes of s (a step's 64 scores) outside [r0, r1] set to -inf.
inline void MaskOutside(__m256* s, int r0, int r1) {
  if (r0 <= 0 && r1 >= kFlashStep - 1) return;
  const __m256i below = _mm256_set1_epi32(r0 - 1), above = _mm256_set1_epi32(r1 + 1);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int v = 0; v < kStepVecs; ++v) {
    const __m256i lane = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * v));
    const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(lane, below), _mm256_cmpgt_epi32(above, lane));
    s[v] = _mm256_blendv_ps(ninf, s[v], _mm256_castsi256_ps(in));
  }
}

}  // namespace
}  // namespace infera::avx2
