// The tiled attention chunk kernel (FlashChunkFn) in AVX2: the operations
// of FlashChunkGeneric in the same order per row, on 8-lane vectors (a
// 16-lane K tile is two of them).
//
// Per step of 64 positions, blocks of up to 3 rows that read the same lanes
// (a token's query heads; in prefill, every token that sees the whole
// step): their scores in two passes of two tiles, 3 rows x 4 vectors of
// sums (12 independent FMA chains, each the definition's single chain per
// lane, enough to cover the FMA latency on both pipes), the K loads shared;
// then each row's online softmax on its eight score vectors
// (ExpNonPositive8: the scalar exp's operations lane-wise); then the
// values, 3 rows x 32 output elements in registers while the positions
// stream past, the V loads shared. The generic kernel this replaces took
// its softmax one lane at a time (GCC left the exp loop scalar) and one row
// at a time elsewhere. While a step's first block computes, the next step's
// K tiles and V rows are prefetched a line at a time (decode over a long
// context streams them from memory).
//
// Included by the AVX2 level (avx2_flash.cc) and, compiled with AVX-VNNI,
// by avxvnni/avxvnni_flash.cc, whose int8-cache scores take 256-bit
// vpdpbusd on the quantized queries: internal linkage, each file compiles
// its own copy with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2/exp256.h"
#include "kernels/cpu/avx2/flash_slots256.h"
#include "kernels/cpu/avx2/softmax256.h"
#include "kernels/flash_generic.h"

namespace infera::avx2 {
namespace {

constexpr int kPassVecs = 4;  // vectors per row and pass (two tiles; 32 elements)
constexpr int kMaxRows = 3;   // rows per block: 12 sums

// One step's K, kFlashStepTiles tiles transposed ([head_dim][16], f32 or
// int8; a zero tile for tiles no lane of the step reads), each lane's dot
// factor (scale; int8: ks_j * scale) and, for the lanes [j0, j1] some row
// reads, V's row pointers and (int8) scales.
struct Step {
  const float* kf[kFlashStepTiles] = {};
  const int8_t* k8[kFlashStepTiles] = {};
  alignas(32) float kscale[kFlashStep];
  float vscale[kFlashStep];
  const float* vf[kFlashStep];
  const int8_t* v8[kFlashStep];
};

// The next step's K tiles and V rows (flash_generic.h), prefetched a line at
// a time from inside this step's loops, so that the loads from memory overlap
// the arithmetic. Null: none.
using NextStep = FlashNextStep;

// Fills `t` for the step at t0 whose lanes [j0, j1] are read: K tiles in
// place or gathered into kbuf (FlashKTile), `zeros` [hd][16] for tiles with
// no read lane. A whole 16-slot group (the usual case) takes its K tile,
// scales and V row pointers with vector operations instead of 16 scalar
// lane loads each.
template <bool kQ8>
void LoadStep(const FlashBlock& b, int32_t t0, int j0, int j1, float* kbuf, const float* zeros, Step* t) {
  const int hd = b.head_dim;
  const int32_t* slots = b.slots + t0;
  const __m256 scale = _mm256_set1_ps(b.scale);
  for (int j = 0; j < kFlashStep; j += 8) {  // lanes no row reads: any finite factors
    _mm256_store_ps(t->kscale + j, scale);
    _mm256_storeu_ps(t->vscale + j, _mm256_setzero_ps());
  }
  for (int c = 0; c < kFlashStepTiles; ++c) {
    const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
    int32_t base = 0;
    if (WholeGroup(slots, c, j0, j1, &base)) {
      const int64_t tile = FlashKIndex(base, 0, hd);
      // Row pointers base + j (4 per vector: 64-bit adds of j * row bytes).
      const int64_t row_bytes = int64_t(hd) * (kQ8 ? 1 : sizeof(float));
      const char* row0 = kQ8 ? reinterpret_cast<const char*>(b.v8) : reinterpret_cast<const char*>(b.v);
      __m256i p = _mm256_add_epi64(_mm256_set1_epi64x(reinterpret_cast<int64_t>(row0 + base * row_bytes)),
                                   _mm256_setr_epi64x(0, row_bytes, 2 * row_bytes, 3 * row_bytes));
      const __m256i step = _mm256_set1_epi64x(4 * row_bytes);
      void* dst = kQ8 ? static_cast<void*>(t->v8 + c0) : static_cast<void*>(t->vf + c0);
      for (int k = 0; k < 4; ++k, p = _mm256_add_epi64(p, step)) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst) + k, p);
      }
      if constexpr (kQ8) {
        t->k8[c] = b.k8 + tile;
        for (int h = 0; h < kFlashTile; h += 8) {
          _mm256_store_ps(t->kscale + c0 + h, _mm256_mul_ps(_mm256_loadu_ps(b.ks + base + h), scale));
          _mm256_storeu_ps(t->vscale + c0 + h, _mm256_loadu_ps(b.vs + base + h));
        }
      } else {
        t->kf[c] = b.k + tile;
      }
      continue;
    }
    float* buf = kbuf + int64_t(c) * kFlashTile * hd;
    if constexpr (kQ8) {
      t->k8[c] = a > z ? reinterpret_cast<const int8_t*>(zeros)
                       : FlashKTile(b.k8, slots + c0, a, z, hd, reinterpret_cast<int8_t*>(buf));
    } else {
      t->kf[c] = a > z ? zeros : FlashKTile(b.k, slots + c0, a, z, hd, buf);
    }
    for (int j = std::max(j0, c0); j <= std::min(j1, c0 + kFlashTile - 1); ++j) {
      const int64_t slot = slots[j];
      if constexpr (kQ8) {
        t->kscale[j] = b.ks[slot] * b.scale;
        t->vscale[j] = b.vs[slot];
        t->v8[j] = b.v8 + slot * hd;
      } else {
        t->vf[j] = b.v + slot * hd;
      }
    }
  }
}

// 8 lanes of K tile c, row d, from lane h (0 or 8), as float.
template <bool kQ8>
inline __m256 LoadK(const Step& t, int c, int d, int h) {
  if constexpr (kQ8) {
    const __m128i k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.k8[c] + d * kFlashTile + h));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(k));
  } else {
    return _mm256_loadu_ps(t.kf[c] + d * kFlashTile + h);
  }
}

#ifdef __AVXVNNI__
constexpr bool kVnni = true;  // int8 caches' scores on vpdpbusd (BlockScoresVnni)
#else
constexpr bool kVnni = false;
#endif

// Rows [r0, r1) of b quantized (int8 caches) as FlashQueriesAsFloats does,
// the whole blocks in vectors with the same values (the block's amax, its
// scale and reciprocal, x * id rounded in the current mode as nearbyint
// does, a NaN element passed over by the maximum as by std::max); a
// shorter last block in scalar code. Per chunk the scalar form took a
// sixth of an int8 decode's attention time (AVX-512, Zen 5). Row r at the
// returned pointer + r * FlashQueryFloats(hd): its q8 as floats [hd] (kVnni:
// as bytes, each 4 in the order (0, 2, 1, 3) BlockScoresVnni reads), then its block scales [nb] and (kVnni) the blocks'
// sums of q8 [nb] (int32).
float* QuantizeQueries(const FlashBlock& b, int r0, int r1, float* scratch) {
  static_assert(kFlashQBlock == 32);
  const int hd = b.head_dim, nb = FlashQBlocks(hd);
  float* base = scratch + FlashChunkQueryOffset(b.rows(), hd);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  constexpr int kNearbyint = _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC;
  for (int r = r0; r < r1; ++r) {
    float* row = base + int64_t(r) * FlashQueryFloats(hd);
    int8_t* row8 = reinterpret_cast<int8_t*>(row);
    int32_t* sums = reinterpret_cast<int32_t*>(row + hd + nb);
    const float* q = b.q + (r / b.g) * b.q_stride + (r % b.g) * hd;
    int d0 = 0, blk = 0;
    for (; d0 + kFlashQBlock <= hd; d0 += kFlashQBlock, ++blk) {
      __m256 x[4], a = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        x[i] = _mm256_loadu_ps(q + d0 + 8 * i);
        a = _mm256_max_ps(_mm256_and_ps(x[i], abs_mask), a);
      }
      __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      m = _mm_max_ps(m, _mm_movehl_ps(m, m));
      m = _mm_max_ss(m, _mm_movehdup_ps(m));
      const float d = _mm_cvtss_f32(m) / 127.0f;
      const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      row[hd + blk] = d;
      __m256i v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x[i], id), kNearbyint));
      if constexpr (kVnni) {
        // 32 int32 in [-127, 127] to bytes in order (the packs work per
        // 128-bit lane: vpermd puts the dwords back in order).
        // Then each 4 bytes in BlockScoresVnni's dimension order (0, 2, 1, 3).
        const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        const __m256i order = _mm256_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15, 0, 2, 1, 3, 4, 6,
                                               5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(row8 + d0),
            _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)), order));
        const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
        __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        s2 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0x4E));
        s2 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1));
        sums[blk] = _mm_cvtsi128_si32(s2);
      } else {
        for (int i = 0; i < 4; ++i) _mm256_storeu_ps(row + d0 + 8 * i, _mm256_cvtepi32_ps(v[i]));
      }
    }
    if (d0 < hd) {
      int32_t sum = 0;
      row[hd + blk] = QuantizeKvRowTo(q + d0, hd - d0, [&](int i, int8_t v) {
        if constexpr (kVnni) {
          row8[d0 + (i & ~3) + ((i & 1) << 1 | (i & 2) >> 1)] = v;  // (0, 2, 1, 3) within each 4
        } else {
          row[d0 + i] = v;
        }
        sum += v;
      });
      if constexpr (kVnni) sums[blk] = sum;
    }
  }
  return base;
}

#ifdef __AVXVNNI__
// BlockScores for an int8 cache with 256-bit vpdpbusd (the same values:
// each block's integer sums are exact either way). q8: the rows' quantized
// queries, qs / qsum their block scales and sums. Per 4 dimensions a tile's
// [4][16] bytes (two loads) are rearranged to 16 lanes of 4 bytes in the
// dimension order (d, d + 2, d + 1, d + 3), which the query's 4 bytes are
// stored in too (QuantizeQueries), and in the lane order (0-3, 8-11) and (4-7, 12-15),
// which the sums are put back from once per tile; K is offset to unsigned
// (k + 128, vpdpbusd multiplies unsigned by signed bytes), each sum
// starting at -128 * sum(q8) of its block to take that out again.
template <int kR>
__attribute__((noinline)) void BlockScoresVnni(const int8_t* const* q8, const float* const* qs,
                                               const int32_t* const* qsum, const Step& t, int hd, const NextStep* next,
                                               __m256 (*s)[kStepVecs]) {
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int c = 0; c < kFlashStepTiles; ++c) {  // a tile at a time: kR x 2 sums, 16 registers in all
    const int v = 2 * c;                       // the tile's vectors s[r][v], s[r][v + 1]
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) s[r][v] = s[r][v + 1] = _mm256_setzero_ps();
    for (int d0 = 0, blk = 0; d0 < hd; d0 += kFlashQBlock, ++blk) {
      __m256i acc[kR][2];
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = _mm256_set1_epi32(-128 * qsum[r][blk]);
      for (int d = d0; d < std::min(hd, d0 + kFlashQBlock); d += 4) {
        if (next != nullptr) _mm_prefetch(next->k[c] + d * kFlashTile, _MM_HINT_T0);
        const int8_t* p = t.k8[c] + d * kFlashTile;
        // Quads (d 0-7, d 8-15, d+1 0-7, d+1 8-15) -> (d 0-7, d+1 0-7 | d 8-15, d+1 8-15).
        const __m256i a = _mm256_permute4x64_epi64(
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), offset), 0xD8);
        const __m256i z = _mm256_permute4x64_epi64(
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)), offset), 0xD8);
        const __m256i lo = _mm256_unpacklo_epi8(a, z);     // (d, d+2) words of lanes 0-7 | 8-15
        const __m256i hi = _mm256_unpackhi_epi8(a, z);     // (d+1, d+3)
        const __m256i k0 = _mm256_unpacklo_epi16(lo, hi);  // lanes 0-3 | 8-11
        const __m256i k1 = _mm256_unpackhi_epi16(lo, hi);  // lanes 4-7 | 12-15
#pragma GCC unroll 4
        for (int r = 0; r < kR; ++r) {
          int32_t q4;  // dimensions (d, d + 2, d + 1, d + 3), as QuantizeQueries stores them
          std::memcpy(&q4, q8[r] + d, sizeof(q4));
          const __m256i qv = _mm256_set1_epi32(q4);
          acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], k0, qv);
          acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], k1, qv);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m256 qsb = _mm256_broadcast_ss(qs[r] + blk);
        s[r][v] = _mm256_fmadd_ps(qsb, _mm256_cvtepi32_ps(acc[r][0]), s[r][v]);
        s[r][v + 1] = _mm256_fmadd_ps(qsb, _mm256_cvtepi32_ps(acc[r][1]), s[r][v + 1]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {  // lanes back in order, times the lanes' factors
      const __m256 a = s[r][v], z = s[r][v + 1];
      s[r][v] = _mm256_mul_ps(_mm256_permute2f128_ps(a, z, 0x20), _mm256_load_ps(t.kscale + 8 * v));
      s[r][v + 1] = _mm256_mul_ps(_mm256_permute2f128_ps(a, z, 0x31), _mm256_load_ps(t.kscale + 8 * (v + 1)));
    }
  }
}
#endif  // __AVXVNNI__

// s[r] [8] = the scaled scores of rows q[0 .. kR) against the step's 64
// lanes: dot(q, k_j) as one FMA chain per lane from 0 in increasing d,
// times kscale_j. Two passes of two tiles each: kR x 4 sums (12 chains for 3
// rows keep both FMA pipes busy past their latency), the K loads shared by
// the rows. int8: q holds the rows' q8 as floats, each block's sums (exact)
// folded into s with the block's scale qs[r][block]. Not inlined, so that
// its sums get the registers to themselves.
template <int kR, bool kQ8>
__attribute__((noinline)) void BlockScores(const float* const* q, const float* const* qs, const Step& t, int hd,
                                           const NextStep* next, __m256 (*s)[kStepVecs]) {
  constexpr int kBytes = kQ8 ? 16 : 64;      // of one tile row
  const int span = kQ8 ? kFlashQBlock : hd;  // dimensions per sum
  for (int pass = 0; pass < 2; ++pass) {
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < kPassVecs; ++i) s[r][kPassVecs * pass + i] = _mm256_setzero_ps();
    }
    for (int d0 = 0; d0 < hd; d0 += span) {
      __m256 acc[kR][kPassVecs];
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
        for (int i = 0; i < kPassVecs; ++i) acc[r][i] = _mm256_setzero_ps();
      }
      for (int d = d0; d < std::min(hd, d0 + span); ++d) {
        if (next != nullptr && pass == 0 && (d * kBytes) % 64 == 0) {
          for (int c = 0; c < kFlashStepTiles; ++c) _mm_prefetch(next->k[c] + d * kBytes, _MM_HINT_T0);
        }
        // kR broadcasts, then one K vector at a time: 12 + 3 + 1 registers.
        __m256 qd[kR];
#pragma GCC unroll 4
        for (int r = 0; r < kR; ++r) qd[r] = _mm256_broadcast_ss(q[r] + d);
#pragma GCC unroll 4
        for (int i = 0; i < kPassVecs; ++i) {
          const __m256 k = LoadK<kQ8>(t, 2 * pass + i / 2, d, 8 * (i % 2));
#pragma GCC unroll 4
          for (int r = 0; r < kR; ++r) acc[r][i] = _mm256_fmadd_ps(qd[r], k, acc[r][i]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m256 qsb = kQ8 ? _mm256_broadcast_ss(qs[r] + d0 / kFlashQBlock) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < kPassVecs; ++i) {
          __m256& dot = s[r][kPassVecs * pass + i];
          dot = kQ8 ? _mm256_fmadd_ps(qsb, acc[r][i], dot) : acc[r][i];
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < kPassVecs; ++i) {
        const int v = kPassVecs * pass + i;
        s[r][v] = _mm256_mul_ps(s[r][v], _mm256_load_ps(t.kscale + 8 * v));
      }
    }
  }
}

// The online softmax of one row's step over its lanes [r0, r1] (s: its 64
// scores, soft-capped here, the other lanes -inf): mx = max(m, s), returns
// corr = ExpNonPositive(m - mx); p [64] = ExpNonPositive(s - mx) (int8:
// times vs_j, the values' factor), l = l * corr + Reduce64(p), m = mx.
template <bool kQ8>
__attribute__((always_inline)) inline float RowSoftmax(const FlashBlock& b, const Step& t, __m256* s, int r0, int r1,
                                                       float* m, float* l, float* p) {
  if (b.softcap > 0) {  // (the lanes masked below too: finite or NaN, then -inf)
    for (int v = 0; v < kStepVecs; ++v) s[v] = SoftCap8(s[v], b.softcap);
  }
  MaskOutside(s, r0, r1);
  const float mx = std::max(*m, Max64(s));
  const float corr = ExpNonPositive(*m - mx);  // 0 on the row's first step
  const __m256 mxv = _mm256_set1_ps(mx);
  __m256 pv[kStepVecs];
  for (int v = 0; v < kStepVecs; ++v) {
    pv[v] = ExpNonPositive8(_mm256_sub_ps(s[v], mxv));
    // int8: pv_j = p_j * vs_j, the definition's product.
    _mm256_store_ps(p + 8 * v, kQ8 ? _mm256_mul_ps(pv[v], _mm256_loadu_ps(t.vscale + 8 * v)) : pv[v]);
  }
  *l = *l * corr + Sum64(pv);
  *m = mx;
  return corr;
}

// Rows orow[0 .. kR), elements [d0, d0 + 8 kV): o = o * corr, then
// fma(p_j, v_j, o) over the rows' lanes j in [r0, r1] in order (int8: p
// holds p_j * vs_j, v is float(v8_j)), in registers, V's loads shared.
template <int kR, int kV, bool kQ8>
__attribute__((noinline)) void BlockValues(float* const* orow, const float* corr, const float (*p)[kFlashStep],
                                           const Step& t, int r0, int r1, int d0, int hd, const NextStep* next) {
  __m256 acc[kR][kV];
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) {
    const __m256 cv = _mm256_set1_ps(corr[r]);
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) acc[r][i] = _mm256_mul_ps(_mm256_loadu_ps(orow[r] + d0 + 8 * i), cv);
  }
  constexpr int kEsz = kQ8 ? 1 : 4;
  for (int j = r0; j <= r1; ++j) {
    if (next != nullptr) {
      const char* row = next->v[j / kFlashTile] + (int64_t(j % kFlashTile) * hd + d0) * kEsz;
      for (int off = 0; off < 8 * kV * kEsz; off += 64) _mm_prefetch(row + off, _MM_HINT_T0);
    }
    // kR broadcasts, then one V vector at a time: 12 + 3 + 1 registers.
    __m256 pj[kR];
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) pj[r] = _mm256_broadcast_ss(&p[r][j]);
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) {
      __m256 v;
      if constexpr (kQ8) {
        v = _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.v8[j] + d0 + 8 * i))));
      } else {
        v = _mm256_loadu_ps(t.vf[j] + d0 + 8 * i);
      }
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) acc[r][i] = _mm256_fmadd_ps(pj[r], v, acc[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) _mm256_storeu_ps(orow[r] + d0 + 8 * i, acc[r][i]);
  }
}

// kR rows (of the step's lanes [r0, r1] each): scores, softmax, values.
// q8: the int8 cache's quantized queries (QuantizeQueries).
template <int kR, bool kQ8>
void BlockStep(const FlashBlock& b, const float* q8, const Step& t, const int* rows, int r0, int r1,
               const NextStep* next, float* m, float* l, float* o) {
  const int hd = b.head_dim;
  const float* q[kR];
  const float* qs[kR] = {};
  float* orow[kR];
  for (int k = 0; k < kR; ++k) {
    if constexpr (kQ8) {
      q[k] = q8 + int64_t(rows[k]) * FlashQueryFloats(hd);
      qs[k] = q[k] + hd;
    } else {
      q[k] = b.q + (rows[k] / b.g) * b.q_stride + (rows[k] % b.g) * hd;
    }
    orow[k] = o + int64_t(rows[k]) * hd;
  }
  __m256 s[kR][kStepVecs];
#ifdef __AVXVNNI__
  if constexpr (kQ8) {
    const int8_t* q8r[kR];
    const int32_t* qsum[kR];
    for (int k = 0; k < kR; ++k) {
      q8r[k] = reinterpret_cast<const int8_t*>(q[k]);
      qsum[k] = reinterpret_cast<const int32_t*>(qs[k] + FlashQBlocks(hd));
    }
    BlockScoresVnni<kR>(q8r, qs, qsum, t, hd, next, s);
  } else {
    BlockScores<kR, kQ8>(q, qs, t, hd, next, s);
  }
#else
  BlockScores<kR, kQ8>(q, qs, t, hd, next, s);
#endif
  alignas(32) float p[kR][kFlashStep];
  float corr[kR];
#pragma GCC unroll 3
  for (int k = 0; k < kR; ++k) corr[k] = RowSoftmax<kQ8>(b, t, s[k], r0, r1, m + rows[k], l + rows[k], p[k]);
  for (int d0 = 0; d0 < hd; d0 += 8 * kPassVecs) {
    switch (std::min(kPassVecs, (hd - d0) / 8)) {
      case 1:
        BlockValues<kR, 1, kQ8>(orow, corr, p, t, r0, r1, d0, hd, next);
        break;
      case 2:
        BlockValues<kR, 2, kQ8>(orow, corr, p, t, r0, r1, d0, hd, next);
        break;
      case 3:
        BlockValues<kR, 3, kQ8>(orow, corr, p, t, r0, r1, d0, hd, next);
        break;
      default:
        BlockValues<kR, 4, kQ8>(orow, corr, p, t, r0, r1, d0, hd, next);
        break;
    }
  }
}

template <bool kQ8>
void FlashChunk(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  float* kbuf = scratch;                           // [4][hd][16] gathered K tiles
  float* zeros = kbuf + int64_t(kFlashStep) * hd;  // [hd][16] the K of unread tiles
  bool zeroed = false;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  const float* q8 = kQ8 ? QuantizeQueries(b, ia * g, ib * g, scratch) : nullptr;
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  const int32_t block_end = b.last[b.nq - 1];
  int ta = ia, tb = ia;
  Step t;
  NextStep next;
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    // Tokens that see part of this step (both bounds move forward).
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashStep - 1) ++tb;
    if (ta >= tb) continue;
    const int j0 = std::max(ulo, t0) - t0, j1 = std::min(uhi, t0 + kFlashStep - 1) - t0;
    if (!zeroed && (j0 >= kFlashTile || j1 < kFlashStep - kFlashTile)) {
      std::fill(zeros, zeros + int64_t(kFlashTile) * hd, 0.0f);
      zeroed = true;
    }
    LoadStep<kQ8>(b, t0, j0, j1, kbuf, zeros, &t);
    // The next step's positions, also past this chunk: the next chunk of a
    // long context usually runs next on the same thread.
    const NextStep* pf = nullptr;  // for the step's first block only
    if (t0 + kFlashStep <= block_end) {
      FindFlashNextStep<kQ8>(b, t0 + kFlashStep, block_end, &next);
      pf = &next;
    }
    // Blocks of up to kMaxRows consecutive rows that read the same lanes
    // (the heads of a token; in prefill, the tokens that see the whole step).
    int rows[kMaxRows], n = 0, br0 = 0, br1 = 0;
    auto flush = [&] {
      switch (n) {
        case 0:
          return;
        case 1:
          BlockStep<1, kQ8>(b, q8, t, rows, br0, br1, pf, m, l, o);
          break;
        case 2:
          BlockStep<2, kQ8>(b, q8, t, rows, br0, br1, pf, m, l, o);
          break;
        default:
          BlockStep<kMaxRows, kQ8>(b, q8, t, rows, br0, br1, pf, m, l, o);
          break;
      }
      n = 0;
      pf = nullptr;
    };
    for (int i = ta; i < tb; ++i) {
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      if (z < t0 || a > t0 + kFlashStep - 1) continue;  // the row does not see this step
      const int r0 = std::max(0, a - t0), r1 = std::min(kFlashStep - 1, z - t0);
      for (int h = 0; h < g; ++h) {
        if (n == kMaxRows || (n > 0 && (r0 != br0 || r1 != br1))) flush();
        br0 = r0;
        br1 = r1;
        rows[n++] = i * g + h;
      }
    }
    flush();
  }
}

// Head sizes that are not a multiple of 8 keep the generic kernel (the same
// bits; no common model has one).
void FlashChunkAvx2(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  if (b.head_dim % 8 != 0) return FlashChunkGeneric(b, lo, hi, m, l, o, scratch);
  if (b.k8 != nullptr) return FlashChunk<true>(b, lo, hi, m, l, o, scratch);
  FlashChunk<false>(b, lo, hi, m, l, o, scratch);
}

}  // namespace
}  // namespace infera::avx2
