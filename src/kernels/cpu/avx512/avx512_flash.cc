// The tiled attention chunk kernel (FlashChunkFn) in AVX-512: the same
// operations in the same order per row as FlashChunkGeneric, with the block's
// rows register-blocked against each tile's K/V.
//
// Per tile of 16 positions (one group of the transposed K layout when the
// KV blocks hold a multiple of 16 slots): scores of up to 6 rows at once, one
// vector load of K per dimension shared by every row (4 accumulators per row:
// the reference's four chains), so a row's 16 scores land in one register;
// the online-softmax update there; then the values, 4 rows × 64 output
// elements at a time, one broadcast probability per row and position.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/reduce512.h"
#include "kernels/flash_generic.h"

namespace infera::avx512 {
namespace {

constexpr int kScoreRows = 6;  // rows per score block: 24 accumulators
constexpr int kValueRows = 4;  // rows per value block: 16 accumulators

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

// One tile's K, transposed ([head_dim][16], f32 or int8) and the factor
// each lane's dot is multiplied by (scale; int8: ks_j * scale). One tile's V:
// row pointers (f32 or int8) and, for int8, each lane's scale.
struct Tile {
  const float* kf = nullptr;
  const int8_t* k8 = nullptr;
  __m512 kscale;
  const float* vf[kFlashTile];
  const int8_t* v8[kFlashTile];
  __m512 vscale;
};

template <bool kQ8>
inline __m512 LoadK(const Tile& t, int d) {
  if constexpr (kQ8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.k8 + d * 16))));
  } else {
    return _mm512_loadu_ps(t.kf + d * 16);
  }
}

// s[r] = the scaled scores of rows q[0 .. kR) against the tile's 16 slots.
template <int kR, bool kQ8>
void Scores(const float* const* q, const Tile& t, int hd, __m512* s) {
  __m512 acc[kR][4];
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int d = 0;
  for (; d + 4 <= hd; d += 4) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512 kv = LoadK<kQ8>(t, d + c);
      for (int r = 0; r < kR; ++r) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d + c]), kv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // head_dim % 4 left: constant indices keep acc in registers
    if (d + c >= hd) break;
    const __m512 kv = LoadK<kQ8>(t, d + c);
    for (int r = 0; r < kR; ++r) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d + c]), kv, acc[r][c]);
  }
  for (int r = 0; r < kR; ++r) {
    const __m512 dot = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
    s[r] = _mm512_mul_ps(dot, t.kscale);
  }
}

// o rows (kR of them) = o * corr, then += p_j * v_j for tile lanes j in
// [j0, j1], in order, on kC 16-float chunks of each row from element d0; the
// last chunk takes the lanes in `tail`. int8: p already holds p_j * vs_j.
template <int kR, int kC, bool kQ8>
void ValuesChunks(float* const* orow, const float* corr, const float* p, const Tile& t, int j0, int j1, int d0,
                  __mmask16 tail) {
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
      if constexpr (kQ8) {
        v[c4] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, t.v8[j] + d0 + 16 * c4)));
      } else {
        v[c4] = _mm512_maskz_loadu_ps(m, t.vf[j] + d0 + 16 * c4);
      }
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

template <int kR, bool kQ8>
void Values(float* const* orow, const float* corr, const float* p, const Tile& t, int j0, int j1, int hd) {
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nc = std::min(4, (hd - d0 + 15) / 16);
    const __mmask16 tail = FirstLanes(hd - d0 - 16 * (nc - 1));
    switch (nc) {
      case 1: ValuesChunks<kR, 1, kQ8>(orow, corr, p, t, j0, j1, d0, tail); break;
      case 2: ValuesChunks<kR, 2, kQ8>(orow, corr, p, t, j0, j1, d0, tail); break;
      case 3: ValuesChunks<kR, 3, kQ8>(orow, corr, p, t, j0, j1, d0, tail); break;
      default: ValuesChunks<kR, 4, kQ8>(orow, corr, p, t, j0, j1, d0, tail); break;
    }
  }
}

// Fills `t` for the tile at t0 whose lanes [j0, j1] are read (K in place
// or gathered into kbuf: FlashKTile; unread lanes' V rows: any row, times
// p = 0).
template <bool kQ8>
void LoadTile(const FlashBlock& b, int32_t t0, int j0, int j1, float* kbuf, float* lane_buf, Tile* t) {
  const int hd = b.head_dim;
  const int32_t* slots = b.slots + t0;
  float* ks = lane_buf;
  float* vs = lane_buf + kFlashTile;
  for (int j = 0; j < kFlashTile; ++j) {
    const bool seen = j >= j0 && j <= j1;
    const int64_t slot = seen ? slots[j] : slots[j0];
    if constexpr (kQ8) {
      t->v8[j] = b.v8 + slot * hd;
      ks[j] = seen ? b.ks[slot] : 0.0f;
      vs[j] = seen ? b.vs[slot] : 0.0f;
    } else {
      t->vf[j] = b.v + slot * hd;
    }
  }
  if constexpr (kQ8) {
    t->kscale = _mm512_mul_ps(_mm512_loadu_ps(ks), _mm512_set1_ps(b.scale));
    t->vscale = _mm512_loadu_ps(vs);
    t->k8 = FlashKTile(b.k8, slots, j0, j1, hd, reinterpret_cast<int8_t*>(kbuf));
  } else {
    t->kscale = _mm512_set1_ps(b.scale);
    t->kf = FlashKTile(b.k, slots, j0, j1, hd, kbuf);
  }
}

template <typename Fn>
void ForRowGroups(int r0, int r1, int n, Fn&& fn) {
  for (int r = r0; r < r1; r += n) fn(r, std::min(n, r1 - r));
}

template <bool kQ8>
void FlashChunk(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  const int R = b.rows();
  float* S = scratch;                          // [R][16] probabilities (int8: times vs)
  float* corr = S + int64_t(R) * kFlashTile;   // [R]
  float* lane_buf = corr + R;                  // [2][16] int8 K and V lane scales
  float* kbuf = lane_buf + 2 * kFlashTile;     // [hd][16] a gathered K tile
  for (int r = ia * g; r < ib * g; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
    std::fill(o + int64_t(r) * hd, o + int64_t(r + 1) * hd, 0.0f);
  }
  auto qrow = [&](int r) { return b.q + (r / g) * b.q_stride + (r % g) * hd; };
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int ta = ia, tb = ia;
  Tile t;
  for (int32_t t0 = ulo - ulo % kFlashTile; t0 <= uhi; t0 += kFlashTile) {
    // Tokens that see part of this tile: those whose range ends at or after
    // t0 and starts at or before t0 + 15 (both bounds move forward).
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashTile - 1) ++tb;
    if (ta >= tb) continue;
    const int32_t plo = std::max(ulo, t0), phi = std::min(uhi, t0 + kFlashTile - 1);
    const int j0 = plo - t0, j1 = phi - t0;
    LoadTile<kQ8>(b, t0, j0, j1, kbuf, lane_buf, &t);
    const int r0 = ta * g, r1 = tb * g;
    const __m512i pos = _mm512_add_epi32(lane, _mm512_set1_epi32(t0));
    // Scores and the online softmax.
    ForRowGroups(r0, r1, kScoreRows, [&](int rg, int nr) {
      const float* q[kScoreRows];
      for (int i = 0; i < nr; ++i) q[i] = qrow(rg + i);
      __m512 sc[kScoreRows];
      switch (nr) {
        case 1: Scores<1, kQ8>(q, t, hd, sc); break;
        case 2: Scores<2, kQ8>(q, t, hd, sc); break;
        case 3: Scores<3, kQ8>(q, t, hd, sc); break;
        case 4: Scores<4, kQ8>(q, t, hd, sc); break;
        case 5: Scores<5, kQ8>(q, t, hd, sc); break;
        default: Scores<6, kQ8>(q, t, hd, sc); break;
      }
      for (int k = 0; k < nr; ++k) {
        const int r = rg + k, i = r / g;
        const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
        float* s = S + int64_t(r) * kFlashTile;
        __m512 sv = sc[k];
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
        _mm512_storeu_ps(s, kQ8 ? _mm512_mul_ps(p, t.vscale) : p);
        m[r] = mx;
      }
    });
    // Values.
    ForRowGroups(r0, r1, kValueRows, [&](int rg, int nr) {
      float* out[kValueRows];
      for (int i = 0; i < nr; ++i) out[i] = o + int64_t(rg + i) * hd;
      const float* p = S + int64_t(rg) * kFlashTile;
      switch (nr) {
        case 1: Values<1, kQ8>(out, corr + rg, p, t, j0, j1, hd); break;
        case 2: Values<2, kQ8>(out, corr + rg, p, t, j0, j1, hd); break;
        case 3: Values<3, kQ8>(out, corr + rg, p, t, j0, j1, hd); break;
        default: Values<4, kQ8>(out, corr + rg, p, t, j0, j1, hd); break;
      }
    });
  }
}

void FlashChunkAny(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  if (b.k8 != nullptr) return FlashChunk<true>(b, lo, hi, m, l, o, scratch);
  FlashChunk<false>(b, lo, hi, m, l, o, scratch);
}

}  // namespace

void FillFlash(KernelTable* t) {
  t->flash_chunk = FlashChunkAny;
  t->flash_variant = "avx512-tiled";
}

}  // namespace infera::avx512
