// exp_generic.h's ExpNonPositive on 16 lanes, operation for operation.
// Included only by files compiled with AVX-512 flags.
#pragma once

#include <immintrin.h>

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

}  // namespace
}  // namespace infera::avx512
