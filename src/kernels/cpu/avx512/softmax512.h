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

// Rows as lanes: lane k (k < 8) of the result is v[k]'s 16 lanes reduced
// by op (rows k >= n: `fill`), in Sum's order (reduce512.h: i + i+8, then
// + i+4, then (0+2)+(1+3)), so that with an add each lane holds exactly
// Sum(v[k]); a max gives the same value in any order. Eight rows share the
// shuffles one row's reduction takes, and no row waits on another's.
template <typename Op>
inline __m512 ReduceRows8(const __m512* v, int n, __m512 fill, Op op) {
  __m512 x[8];
  for (int k = 0; k < 8; ++k) x[k] = k < n ? v[k] : fill;
  __m512 h[4];  // h[k]: [row 2k's lanes i op i+8 (8) | row 2k+1's]
  for (int k = 0; k < 4; ++k) {
    h[k] = op(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0x44), _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0xEE));
  }
  __m512 q[2];  // q[k]: rows 4k .. 4k+3, each its lanes i op i+4 (4) in one 128-bit lane
  for (int k = 0; k < 2; ++k) {
    q[k] = op(_mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], 0x88), _mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], 0xDD));
    const __m512 e = op(q[k], _mm512_permute_ps(q[k], 0x4E));  // lanes 0, 1: q0 op q2, q1 op q3
    q[k] = op(e, _mm512_permute_ps(e, 0xB1));                  // lane 0: e0 op e1
  }
  const __m512i first_lanes = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutex2var_ps(q[0], first_lanes, q[1]);
}

inline __mmask16 RowLanes(int n) { return static_cast<__mmask16>((1u << n) - 1); }

// The lanes [a[k], z[k]] that rows rg + k (k < nr) of b read of the step at
// t0, within the chunk's positions [lo, hi].
inline void StepLanes(const FlashBlock& b, int32_t lo, int32_t hi, int32_t t0, int rg, int nr, int32_t* a, int32_t* z) {
  for (int k = 0; k < nr; ++k) {
    const int i = (rg + k) / b.g;
    a[k] = std::max(lo, b.first[i]) - t0;
    z[k] = std::min(hi, b.last[i]) - t0;
  }
}

// The step's scores of n rows (n <= 8; sc[k]: row k's kFlashStepTiles
// tiles; the row reads lanes [a[k], z[k]]) soft-capped and masked in place
// (rows that read the whole step without a cap are left as they are: the
// same values); their new running maxima mx = max(m, max(sc[k])), returned
// as lanes k; corr [n] = ExpNonPositive(m - mx), and m [n] = mx. The
// scalar definition's operations, lane k doing row k's (NaN scores
// included: left out of the max, and their p is 0).
inline __m512 StepMaxRows(__m512 (*sc)[kFlashStepTiles], int n, const int32_t* a, const int32_t* z, float softcap,
                          float* m, float* corr) {
  __m512 vmax[8];
  for (int k = 0; k < n; ++k) {
    if (softcap > 0 || a[k] > 0 || z[k] < kFlashStep - 1) {
      const __m512i av = _mm512_set1_epi32(a[k]), zv = _mm512_set1_epi32(z[k]);
      for (int c = 0; c < kFlashStepTiles; ++c) sc[k][c] = CapAndMask(sc[k][c], c, av, zv, softcap);
    }
    // VMAXPS returns its second operand when either is NaN: a NaN score is
    // passed over, as std::max(mx, s) does in the definition.
    vmax[k] = _mm512_set1_ps(-INFINITY);
    for (int c = 0; c < kFlashStepTiles; ++c) vmax[k] = _mm512_max_ps(sc[k][c], vmax[k]);
  }
  const __mmask16 rows = RowLanes(n);
  const __m512 m_old = _mm512_maskz_loadu_ps(rows, m);
  const __m512 mx = _mm512_max_ps(
      m_old, ReduceRows8(vmax, n, _mm512_set1_ps(-INFINITY), [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); }));
  _mm512_mask_storeu_ps(corr, rows, ExpNonPositive16(_mm512_sub_ps(m_old, mx)));
  _mm512_mask_storeu_ps(m, rows, mx);
  return mx;
}

// Lane k of v, in every lane.
inline __m512 LaneOf(__m512 v, int k) { return _mm512_permutexvar_ps(_mm512_set1_epi32(k), v); }

// l [n] = l * corr + Sum(p[k]) for n rows (n <= 8), lane k doing row k's
// operations (a multiply, then an add).
inline void AddRowSums(const __m512* p, int n, const float* corr, float* l) {
  const __mmask16 rows = RowLanes(n);
  const __m512 sums = ReduceRows8(p, n, _mm512_setzero_ps(), [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
  const __m512 lv = _mm512_mul_ps(_mm512_maskz_loadu_ps(rows, l), _mm512_maskz_loadu_ps(rows, corr));
  _mm512_mask_storeu_ps(l, rows, _mm512_add_ps(lv, sums));
}

}  // namespace
}  // namespace infera::avx512
