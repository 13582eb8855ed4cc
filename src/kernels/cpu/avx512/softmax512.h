// The tiled attention kernels' softmax pieces on 16 lanes, operation for
// operation those of the scalar definitions (exp_generic.h,
// flash_generic.h). Included only by files compiled with AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/flash_generic.h"

namespace infera::avx512 {
namespace {

inline __m512 ExpNonPositive16(__m512 x_in) {
  const __m512 lim = _mm512_set1_ps(-87.0f);
  const __m512 x = _mm512_max_ps(x_in, lim);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23));
  const __mmask16 keep = _mm512_cmp_ps_mask(x_in, lim, _CMP_GT_OQ);
  return _mm512_maskz_mov_ps(keep, _mm512_castsi512_ps(bits));
}

// Scores s of tile c of a step (lanes c * 16 + i) soft-capped (softcap > 0)
// and set to -inf outside the row's lanes [a, z] (a, z broadcast).
inline __m512 CapAndMask(__m512 s, int c, __m512i a, __m512i z, float softcap) {
  if (softcap > 0) {
    alignas(64) float x[16];
    _mm512_store_ps(x, s);
    for (float& v : x) v = SoftCap(v, softcap);
    s = _mm512_load_ps(x);
  }
  const __m512i pos = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm512_set1_epi32(c * 16));
  const __mmask16 valid = _mm512_cmp_epi32_mask(pos, a, _MM_CMPINT_NLT) & _mm512_cmp_epi32_mask(pos, z, _MM_CMPINT_LE);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, s);
}

// One row's scores of a step, sc [kFlashStepTiles] -> sv: capped and masked
// to the row's lanes [a, z] of the step; returns the new running max
// max(m, sv).
inline float StepMax(const __m512* sc, int32_t a, int32_t z, float softcap, float m, __m512* sv) {
  const __m512i av = _mm512_set1_epi32(a), zv = _mm512_set1_epi32(z);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int c = 0; c < kFlashStepTiles; ++c) {
    sv[c] = CapAndMask(sc[c], c, av, zv, softcap);
    vmax = _mm512_max_ps(vmax, sv[c]);
  }
  return std::max(m, _mm512_reduce_max_ps(vmax));
}

}  // namespace
}  // namespace infera::avx512
