// The tiled attention chunk kernel (FlashChunkFn) in AVX-512: the same
// operations in the same order per row as FlashChunkGeneric, with the block's
// rows register-blocked against each tile's K/V rows.
//
// Per tile of 16 positions: scores of 4 rows × 4 keys at a time (16 dot
// accumulators of the reference's lane structure, summed by one transposing
// butterfly with Reduce16's pairings), the online-softmax update of each row
// on 16 lanes, then the values: 4 rows × 64 output elements at a time, one
// broadcast probability per row and position.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/reduce512.h"
#include "kernels/flash_generic.h"

namespace infera::avx512 {
namespace {

inline __mmask16 FirstLanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// ExpNonPositive on 16 lanes, operation for operation.
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

// Scores of kR rows × 4 keys: s[r * 16 + j] = dot(q_r, k_j) for the 4 keys
// starting at tile lane j0. Rows past kR are not computed.
template <int kR>
void Scores4x4(const float* const* qrow, const float* const* krow, int hd, float* s, int j0) {
  __m512 acc[16];
  for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 16 <= hd; d += 16) {
    __m512 kv[4];
    for (int k = 0; k < 4; ++k) kv[k] = _mm512_loadu_ps(krow[k] + d);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const __m512 qv = _mm512_loadu_ps(qrow[r] + d);
      for (int k = 0; k < 4; ++k) acc[r * 4 + k] = _mm512_fmadd_ps(qv, kv[k], acc[r * 4 + k]);
    }
  }
  if (d < hd) {  // as DotF32: zero lanes past head_dim still take fma(0, 0, acc)
    const __mmask16 m = FirstLanes(hd - d);
    __m512 kv[4];
    for (int k = 0; k < 4; ++k) kv[k] = _mm512_maskz_loadu_ps(m, krow[k] + d);
    for (int r = 0; r < kR; ++r) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, qrow[r] + d);
      for (int k = 0; k < 4; ++k) acc[r * 4 + k] = _mm512_fmadd_ps(qv, kv[k], acc[r * 4 + k]);
    }
  }
  const __m512 sums = Sum16x16(acc);
  for (int r = 0; r < kR; ++r) _mm_storeu_ps(s + r * kFlashTile + j0, _mm512_extractf32x4_ps(sums, r));
}

// o rows (kR of them) = o * corr, then += p_j * v_j for tile lanes j in
// [j0, j1], in order, on kC 16-float chunks of each row from element d0; the
// last chunk takes the lanes in `tail`.
template <int kR, int kC>
void ValuesChunks(float* const* orow, const float* corr, const float* p, const float* const* vrow, int j0, int j1,
                  int d0, __mmask16 tail) {
  __m512 acc[kR][kC];
  for (int r = 0; r < kR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      acc[r][c4] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow[r] + d0 + 16 * c4), c);
    }
  }
  for (int j = j0; j <= j1; ++j) {
    __m512 v[kC];
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      v[c4] = _mm512_maskz_loadu_ps(m, vrow[j] + d0 + 16 * c4);
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r * kFlashTile + j]);
      for (int c4 = 0; c4 < kC; ++c4) acc[r][c4] = _mm512_fmadd_ps(pj, v[c4], acc[r][c4]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(orow[r] + d0 + 16 * c4, m, acc[r][c4]);
    }
  }
}

template <int kR>
void Values(float* const* orow, const float* corr, const float* p, const float* const* vrow, int j0, int j1,
            int hd) {
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nc = std::min(4, (hd - d0 + 15) / 16);
    const __mmask16 tail = FirstLanes(hd - d0 - 16 * (nc - 1));
    switch (nc) {
      case 1: ValuesChunks<kR, 1>(orow, corr, p, vrow, j0, j1, d0, tail); break;
      case 2: ValuesChunks<kR, 2>(orow, corr, p, vrow, j0, j1, d0, tail); break;
      case 3: ValuesChunks<kR, 3>(orow, corr, p, vrow, j0, j1, d0, tail); break;
      default: ValuesChunks<kR, 4>(orow, corr, p, vrow, j0, j1, d0, tail); break;
    }
  }
}

template <typename Fn>
void ForRowGroups(int r0, int r1, Fn&& fn) {
  for (int r = r0; r < r1; r += 4) fn(r, std::min(4, r1 - r));
}

void FlashChunk(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  const int R = b.rows();
  float* S = scratch;              // [R][16] scores, then probabilities
  float* corr = S + int64_t(R) * kFlashTile;  // [R]
  float* kbuf = corr + R;          // [16][hd] dequantized int8 rows
  float* vbuf = kbuf + kFlashTile * hd;
  float* zero_row = vbuf + kFlashTile * hd;  // [hd]: read (times p = 0) where no row sees a position
  std::fill(zero_row, zero_row + hd, 0.0f);
  for (int r = ia * g; r < ib * g; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
    std::fill(o + int64_t(r) * hd, o + int64_t(r + 1) * hd, 0.0f);
  }
  auto qrow = [&](int r) { return b.q + (r / g) * b.q_stride + (r % g) * hd; };
  auto orow = [&](int r) { return o + int64_t(r) * hd; };
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int ta = ia, tb = ia;
  for (int32_t t0 = ulo - ulo % kFlashTile; t0 <= uhi; t0 += kFlashTile) {
    // Tokens that see part of this tile: those whose range ends at or after
    // t0 and starts at or before t0 + 15 (both bounds move forward).
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashTile - 1) ++tb;
    if (ta >= tb) continue;
    const int32_t plo = std::max(ulo, t0), phi = std::min(uhi, t0 + kFlashTile - 1);
    const int j0 = plo - t0, j1 = phi - t0;
    const float* krow[kFlashTile];
    const float* vrow[kFlashTile];
    for (int j = 0; j < kFlashTile; ++j) {
      if (j < j0 || j > j1) {
        krow[j] = vrow[j] = zero_row;
        continue;
      }
      const int32_t slot = b.slots[t0 + j];
      krow[j] = FlashKRow(b, slot, kbuf + j * hd);
      vrow[j] = FlashVRow(b, slot, vbuf + j * hd);
    }
    const int r0 = ta * g, r1 = tb * g;
    // Scores.
    ForRowGroups(r0, r1, [&](int r, int nr) {
      const float* q[4];
      for (int i = 0; i < 4; ++i) q[i] = qrow(r + std::min(i, nr - 1));
      for (int k0 = j0 - j0 % 4; k0 <= j1; k0 += 4) {
        float* s = S + int64_t(r) * kFlashTile;
        switch (nr) {
          case 1: Scores4x4<1>(q, krow + k0, hd, s, k0); break;
          case 2: Scores4x4<2>(q, krow + k0, hd, s, k0); break;
          case 3: Scores4x4<3>(q, krow + k0, hd, s, k0); break;
          default: Scores4x4<4>(q, krow + k0, hd, s, k0); break;
        }
      }
    });
    // Online softmax, row by row.
    const __m512i pos = _mm512_add_epi32(lane, _mm512_set1_epi32(t0));
    for (int r = r0; r < r1; ++r) {
      const int i = r / g;
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      float* s = S + int64_t(r) * kFlashTile;
      __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(s), _mm512_set1_ps(b.scale));
      if (b.softcap > 0) {
        _mm512_storeu_ps(s, sv);
        for (int j = 0; j < kFlashTile; ++j) s[j] = SoftCap(s[j], b.softcap);
        sv = _mm512_loadu_ps(s);
      }
      const __mmask16 valid = _mm512_cmp_epi32_mask(pos, _mm512_set1_epi32(a), _MM_CMPINT_NLT) &
                              _mm512_cmp_epi32_mask(pos, _mm512_set1_epi32(z), _MM_CMPINT_LE);
      sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, sv);
      const float mx = std::max(m[r], _mm512_reduce_max_ps(sv));
      corr[r] = ExpNonPositive(m[r] - mx);
      const __m512 p = ExpNonPositive16(_mm512_sub_ps(sv, _mm512_set1_ps(mx)));
      l[r] = l[r] * corr[r] + Sum(p);
      _mm512_storeu_ps(s, p);
      m[r] = mx;
    }
    // Values.
    ForRowGroups(r0, r1, [&](int r, int nr) {
      float* out[4];
      for (int i = 0; i < nr; ++i) out[i] = orow(r + i);
      const float* p = S + int64_t(r) * kFlashTile;
      switch (nr) {
        case 1: Values<1>(out, corr + r, p, vrow, j0, j1, hd); break;
        case 2: Values<2>(out, corr + r, p, vrow, j0, j1, hd); break;
        case 3: Values<3>(out, corr + r, p, vrow, j0, j1, hd); break;
        default: Values<4>(out, corr + r, p, vrow, j0, j1, hd); break;
      }
    });
  }
}

}  // namespace

void FillFlash(KernelTable* t) {
  t->flash_chunk = FlashChunk;
  t->flash_variant = "avx512-tiled";
}

}  // namespace infera::avx512
