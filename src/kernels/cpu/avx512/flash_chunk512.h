// The tiled attention chunk kernel (FlashChunkFn) in AVX-512: the same
// operations in the same order per row as FlashChunkGeneric, with the block's
// rows register-blocked against each tile's K/V.
//
// Per step of 64 positions (four groups of the transposed K layout when the
// KV blocks hold a multiple of 16 slots): scores of up to 6 rows at once,
// four vector loads of K per dimension shared by every row (one accumulator
// per row and group: the reference's single chain), so a row's 64 scores
// land in four registers; the online-softmax update of the 6 rows together,
// one row per lane for their maxima, corrections and sums (StepMaxRows,
// AddRowSums); then the values, 4 rows × 64 output elements at a time, one
// broadcast probability per row and position. While a step computes, its
// first row group prefetches the next step's K and V a line at a time
// (decode over a long context streams them from memory: 1.4× from
// prefetching alone).
//
// Included by the files of the AVX-512 levels (internal linkage: each
// compiles its own copy with its own flags). Compiled with AVX512-VNNI
// (avx512vnni/vnni_flash.cc), an int8 cache's scores take vpdpbusd on the
// quantized queries instead of converting every K element to float.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx512/flash_slots512.h"
#include "kernels/cpu/avx512/softmax512.h"
#include "kernels/flash_generic.h"

namespace infera::avx512 {
namespace {

constexpr int kScoreRows = 6;  // rows per score block: 24 accumulators
constexpr int kValueRows = 4;  // rows per value block: 16 accumulators

inline __mmask16 FirstLanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// One step's K, kFlashStepTiles tiles transposed ([head_dim][16], f32 or
// int8; a zero tile for tiles no lane of the step reads), and the factor
// each lane's dot is multiplied by (scale; int8: ks_j * scale). Its V: row
// pointers (f32 or int8) and, for int8, each lane's scale.
struct Step {
  const float* kf[kFlashStepTiles] = {};
  const int8_t* k8[kFlashStepTiles] = {};
  __m512 kscale[kFlashStepTiles];
  const float* vf[kFlashStep];
  const int8_t* v8[kFlashStep];
  __m512 vscale[kFlashStepTiles];
};

// The next step's K tiles and V rows (flash_generic.h), prefetched a line at
// a time from inside this step's loops, so that the loads from memory overlap
// the arithmetic. Null: none.
using NextStep = FlashNextStep;

template <bool kQ8>
inline __m512 LoadK(const Step& t, int c, int d) {
  if constexpr (kQ8) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.k8[c] + d * 16))));
  } else {
    return _mm512_loadu_ps(t.kf[c] + d * 16);
  }
}

// s[r][c] = the scaled scores of rows q[0 .. kR) against tile c's 16 slots:
// one FMA chain per row and tile (4 K loads shared by kR broadcasts per d).
// int8: q holds the rows' q8 as floats; each block's sums (exact) are folded
// into s with the block's scale qs[r][block]. Not inlined: inside the chunk
// function the compiler kept 8 of the 24 accumulators of 6 rows on the stack
// (prefill blocks 1.19x without).
template <int kR, bool kQ8>
__attribute__((noinline)) void Scores(const float* const* q, const float* const* qs, const Step& t, int hd,
                                      const NextStep* next, __m512 (*s)[kFlashStepTiles]) {
  const int span = kQ8 ? kFlashQBlock : hd;  // dimensions per sum
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_setzero_ps();
  }
  for (int d0 = 0; d0 < hd; d0 += span) {
    __m512 acc[kR][kFlashStepTiles];
    for (int r = 0; r < kR; ++r) {
      for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    for (int d = d0; d < std::min(hd, d0 + span); ++d) {
      __m512 kv[kFlashStepTiles];
      for (int c = 0; c < kFlashStepTiles; ++c) kv[c] = LoadK<kQ8>(t, c, d);
      constexpr int kBytes = kQ8 ? 16 : 64;  // of one tile row
      if (next != nullptr && (d * kBytes) % 64 == 0) {
        for (int c = 0; c < kFlashStepTiles; ++c) _mm_prefetch(next->k[c] + d * kBytes, _MM_HINT_T0);
      }
      for (int r = 0; r < kR; ++r) {
        const __m512 qd = _mm512_set1_ps(q[r][d]);
        for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_fmadd_ps(qd, kv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 qsb = kQ8 ? _mm512_set1_ps(qs[r][d0 / kFlashQBlock]) : _mm512_setzero_ps();
      for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = kQ8 ? _mm512_fmadd_ps(qsb, acc[r][c], s[r][c]) : acc[r][c];
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_mul_ps(s[r][c], t.kscale[c]);
  }
}

// QuantizeFlashQuery of one row q [hd] in vectors, the same values (the
// block's amax, its scale and reciprocal, x * id rounded in the current
// mode as nearbyint does; a NaN element is passed over by the maximum as by
// std::max): q8 [hd] bytes or qf [hd] floats (whichever is not null), the
// block scales qs [nb] and, when sums is not null, the blocks' sums of q8.
// Per chunk the scalar form took a sixth of an int8 decode's attention time.
inline void QuantizeQueryRow(const float* q, int hd, int8_t* q8, float* qf, float* qs, int32_t* sums) {
  static_assert(kFlashQBlock == 32);
  for (int b = 0, d0 = 0; d0 < hd; ++b, d0 += kFlashQBlock) {
    const int n = std::min(kFlashQBlock, hd - d0);
    const __mmask16 m0 = FirstLanes(n), m1 = FirstLanes(std::max(0, n - 16));
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, q + d0), x1 = _mm512_maskz_loadu_ps(m1, q + d0 + 16);
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_max_ps(_mm512_abs_ps(x1), _mm512_setzero_ps()));
    const float d = _mm512_reduce_max_ps(a) / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    qs[b] = d;
    constexpr int kNearbyint = _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC;
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, id), kNearbyint));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, id), kNearbyint));
    if (q8 != nullptr) {
      _mm_mask_storeu_epi8(q8 + d0, m0, _mm512_cvtepi32_epi8(i0));
      _mm_mask_storeu_epi8(q8 + d0 + 16, m1, _mm512_cvtepi32_epi8(i1));
    } else {
      _mm512_mask_storeu_ps(qf + d0, m0, _mm512_cvtepi32_ps(i0));
      _mm512_mask_storeu_ps(qf + d0 + 16, m1, _mm512_cvtepi32_ps(i1));
    }
    if (sums != nullptr) sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  }
}

// Rows [r0, r1) of b quantized into the chunk scratch at
// FlashChunkQueryOffset: row r at the returned pointer + r *
// FlashQueryFloats(hd): q8 as floats [hd] (int8: bytes), then from float hd
// its block scales [nb] and (int8) the blocks' sums of q8 [nb] (int32).
inline float* QuantizeQueries(const FlashBlock& b, int r0, int r1, bool int8, float* scratch) {
  const int hd = b.head_dim, nb = FlashQBlocks(hd);
  float* base = scratch + FlashChunkQueryOffset(b.rows(), hd);
  for (int r = r0; r < r1; ++r) {
    float* row = base + int64_t(r) * FlashQueryFloats(hd);
    const float* q = b.q + (r / b.g) * b.q_stride + (r % b.g) * hd;
    QuantizeQueryRow(q, hd, int8 ? reinterpret_cast<int8_t*>(row) : nullptr, row, row + hd,
                     int8 ? reinterpret_cast<int32_t*>(row + hd + nb) : nullptr);
  }
  return base;
}

#ifdef __AVX512VNNI__
// Scores for an int8 cache with vpdpbusd (the same values as Scores<kR,
// true>: each block's integer sums are exact either way). q8: the rows'
// quantized queries, qs / qsum their block scales and sums (head_dim a
// multiple of 4). Per 4 dimensions, a tile's [4][16] bytes are permuted to
// 16 lanes of 4 dimensions (vpermd, vpshufb) and offset to unsigned (k +
// 128, as vpdpbusd multiplies unsigned by signed bytes); each sum starts at
// -128 * sum(q8) of its block to take that offset back out.
template <int kR>
__attribute__((noinline)) void ScoresVnni(const int8_t* const* q8, const float* const* qs, const int32_t* const* qsum,
                                          const Step& t, int hd, const NextStep* next, __m512 (*s)[kFlashStepTiles]) {
  const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_setzero_ps();
  }
  for (int d0 = 0, blk = 0; d0 < hd; d0 += kFlashQBlock, ++blk) {
    __m512i acc[kR][kFlashStepTiles];
    for (int r = 0; r < kR; ++r) {
      const __m512i start = _mm512_set1_epi32(-128 * qsum[r][blk]);
      for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = start;
    }
    for (int d = d0; d < std::min(hd, d0 + kFlashQBlock); d += 4) {
      if (next != nullptr) {
        for (int c = 0; c < kFlashStepTiles; ++c) _mm_prefetch(next->k[c] + d * kFlashTile, _MM_HINT_T0);
      }
      __m512i kv[kFlashStepTiles];
      for (int c = 0; c < kFlashStepTiles; ++c) {
        const __m512i raw = _mm512_loadu_si512(t.k8[c] + d * kFlashTile);  // [4 dims][16 lanes]
        kv[c] = _mm512_xor_si512(_mm512_shuffle_epi8(_mm512_permutexvar_epi32(lanes, raw), bytes), offset);
      }
      for (int r = 0; r < kR; ++r) {
        int32_t q4;
        std::memcpy(&q4, q8[r] + d, sizeof(q4));
        const __m512i qd = _mm512_set1_epi32(q4);
        for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], kv[c], qd);
      }
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 qsb = _mm512_set1_ps(qs[r][blk]);
      for (int c = 0; c < kFlashStepTiles; ++c) {
        s[r][c] = _mm512_fmadd_ps(qsb, _mm512_cvtepi32_ps(acc[r][c]), s[r][c]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_mul_ps(s[r][c], t.kscale[c]);
  }
}

#endif  // __AVX512VNNI__

// o rows (kR of them) = o * corr, then += p_j * v_j for step lanes j in
// [j0, j1], in order, on kC 16-float chunks of each row from element d0; the
// last chunk takes the lanes in `tail`. int8: p already holds p_j * vs_j.
template <int kR, int kC, bool kQ8>
void ValuesChunks(float* const* orow, const float* corr, const float* p, const Step& t, int j0, int j1, int d0,
                  __mmask16 tail, int hd, const NextStep* next) {
  __m512 acc[kR][kC];
  for (int r = 0; r < kR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      acc[r][c4] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow[r] + d0 + 16 * c4), c);
    }
  }
  constexpr int kBytes = kQ8 ? 16 : 64;  // of one 16-element chunk
  for (int j = j0; j <= j1; ++j) {
    if (next != nullptr) {
      const unsigned lane = static_cast<unsigned>(j);  // j >= 0: shifts, not signed division
      const char* row = next->v[lane / kFlashTile] + size_t(lane % kFlashTile) * hd * (kBytes / 16);
      for (int c4 = 0; c4 < kC; c4 += 64 / kBytes) _mm_prefetch(row + (d0 + 16 * c4) * (kBytes / 16), _MM_HINT_T0);
    }
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
      const __m512 pj = _mm512_set1_ps(p[r * kFlashStep + j]);
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
void Values(float* const* orow, const float* corr, const float* p, const Step& t, int j0, int j1, int hd,
            const NextStep* next) {
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nc = std::min(4, (hd - d0 + 15) / 16);
    const __mmask16 tail = FirstLanes(hd - d0 - 16 * (nc - 1));
    switch (nc) {
      case 1:
        ValuesChunks<kR, 1, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next);
        break;
      case 2:
        ValuesChunks<kR, 2, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next);
        break;
      case 3:
        ValuesChunks<kR, 3, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next);
        break;
      default:
        ValuesChunks<kR, 4, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next);
        break;
    }
  }
}

// Fills `t` for the step at t0 whose lanes [j0, j1] are read: K tiles in
// place or gathered into kbuf (FlashKTile), `zeros` [hd][16] for tiles with
// no read lane; unread lanes' V rows: any row, times p = 0. A whole group's
// tile takes its V rows, K tile and scales with vector operations.
template <bool kQ8>
void LoadStep(const FlashBlock& b, int32_t t0, int j0, int j1, float* kbuf, const float* zeros, float* lane_buf,
              Step* t) {
  const int hd = b.head_dim;
  const int32_t* slots = b.slots + t0;
  float* ks = lane_buf;
  float* vs = lane_buf + kFlashStep;
  const __m512 scale = _mm512_set1_ps(b.scale);
  for (int c = 0; c < kFlashStepTiles; ++c) {
    const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
    int32_t base = 0;
    if (WholeGroup(slots, c, j0, j1, &base)) {
      // Row pointers base + j * hd (bytes: elements times the element size).
      const int64_t elem = kQ8 ? 1 : sizeof(float);
      const char* row0 = kQ8 ? reinterpret_cast<const char*>(b.v8) : reinterpret_cast<const char*>(b.v);
      const int64_t r = hd * elem;
      const __m512i step = _mm512_set1_epi64(8 * r);
      const __m512i p = _mm512_add_epi64(_mm512_set1_epi64(reinterpret_cast<int64_t>(row0 + base * r)),
                                         _mm512_setr_epi64(0, r, 2 * r, 3 * r, 4 * r, 5 * r, 6 * r, 7 * r));
      void* dst = kQ8 ? static_cast<void*>(t->v8 + c0) : static_cast<void*>(t->vf + c0);
      _mm512_storeu_si512(dst, p);
      _mm512_storeu_si512(static_cast<char*>(dst) + 64, _mm512_add_epi64(p, step));
      const int64_t tile = FlashKIndex(base, 0, hd);
      if constexpr (kQ8) {
        t->kscale[c] = _mm512_mul_ps(_mm512_loadu_ps(b.ks + base), scale);
        t->vscale[c] = _mm512_loadu_ps(b.vs + base);
        t->k8[c] = b.k8 + tile;
      } else {
        t->kscale[c] = scale;
        t->kf[c] = b.k + tile;
      }
      continue;
    }
    for (int j = c0; j < c0 + kFlashTile; ++j) {
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
    float* buf = kbuf + int64_t(c) * kFlashTile * hd;
    if constexpr (kQ8) {
      t->kscale[c] = _mm512_mul_ps(_mm512_loadu_ps(ks + c0), scale);
      t->vscale[c] = _mm512_loadu_ps(vs + c0);
      t->k8[c] = a > z ? reinterpret_cast<const int8_t*>(zeros)
                       : FlashKTile(b.k8, slots + c0, a, z, hd, reinterpret_cast<int8_t*>(buf));
    } else {
      t->kscale[c] = scale;
      t->kf[c] = a > z ? zeros : FlashKTile(b.k, slots + c0, a, z, hd, buf);
    }
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
  float* S = scratch;                              // [R][64] probabilities (int8: times vs)
  float* corr = S + int64_t(R) * kFlashStep;       // [R]
  float* lane_buf = corr + R;                      // [2][64] int8 K and V lane scales
  float* kbuf = lane_buf + 2 * kFlashStep;         // [4][hd][16] gathered K tiles
  float* zeros = kbuf + int64_t(kFlashStep) * hd;  // [hd][16] the K of unread tiles
  bool zeroed = false;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  auto qrow = [&](int r) { return b.q + (r / g) * b.q_stride + (r % g) * hd; };
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  int ta = ia, tb = ia;
  const int32_t block_end = b.last[b.nq - 1];
  Step t;
  NextStep next;
  // int8: the rows' quantized queries (as int8 for ScoresVnni, else as floats).
#ifdef __AVX512VNNI__
  const bool vnni = kQ8 && hd % 4 == 0;
#else
  const bool vnni = false;
#endif
  const float* qbase = kQ8 ? QuantizeQueries(b, ia * g, ib * g, vnni, scratch) : nullptr;
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    // Tokens that see part of this step: those whose range ends at or after
    // t0 and starts at or before t0 + 63 (both bounds move forward).
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashStep - 1) ++tb;
    if (ta >= tb) continue;
    const int32_t plo = std::max(ulo, t0), phi = std::min(uhi, t0 + kFlashStep - 1);
    const int j0 = plo - t0, j1 = phi - t0;
    if (!zeroed && (j0 >= kFlashTile || j1 < kFlashStep - kFlashTile)) {
      std::fill(zeros, zeros + int64_t(kFlashTile) * hd, 0.0f);
      zeroed = true;
    }
    LoadStep<kQ8>(b, t0, j0, j1, kbuf, zeros, lane_buf, &t);
    // The next step's positions, also past this chunk: the next chunk of a
    // long context usually runs next on the same thread.
    const NextStep* step_pf = nullptr;  // for the step's first row group only
    if (t0 + kFlashStep <= block_end) {
      FindFlashNextStep<kQ8>(b, t0 + kFlashStep, block_end, &next);
      step_pf = &next;
    }
    const int r0 = ta * g, r1 = tb * g;
    // Scores and the online softmax.
    ForRowGroups(r0, r1, kScoreRows, [&](int rg, int nr) {
      const float* q[kScoreRows];
      const float* qs[kScoreRows] = {};
      for (int i = 0; i < nr; ++i) {
        q[i] = kQ8 ? qbase + int64_t(rg + i) * FlashQueryFloats(hd) : qrow(rg + i);
        if (kQ8) qs[i] = q[i] + hd;
      }
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      __m512 sc[kScoreRows][kFlashStepTiles];
      if (vnni) {
#ifdef __AVX512VNNI__
        const int8_t* q8[kScoreRows];
        const int32_t* qsum[kScoreRows];
        for (int i = 0; i < nr; ++i) {
          q8[i] = reinterpret_cast<const int8_t*>(q[i]);
          qsum[i] = reinterpret_cast<const int32_t*>(qs[i] + FlashQBlocks(hd));
        }
        // At most 3 rows per call: their 12 int32 sums stay in registers (with
        // 6 rows' 24 GCC copied and spilled them); the K permutes repeat.
        for (int i = 0; i < nr; i += 3) {
          const NextStep* p = i == 0 ? pf : nullptr;
          switch (std::min(3, nr - i)) {
            case 1:
              ScoresVnni<1>(q8 + i, qs + i, qsum + i, t, hd, p, sc + i);
              break;
            case 2:
              ScoresVnni<2>(q8 + i, qs + i, qsum + i, t, hd, p, sc + i);
              break;
            default:
              ScoresVnni<3>(q8 + i, qs + i, qsum + i, t, hd, p, sc + i);
              break;
          }
        }
#endif
      } else {
        switch (nr) {
          case 1:
            Scores<1, kQ8>(q, qs, t, hd, pf, sc);
            break;
          case 2:
            Scores<2, kQ8>(q, qs, t, hd, pf, sc);
            break;
          case 3:
            Scores<3, kQ8>(q, qs, t, hd, pf, sc);
            break;
          case 4:
            Scores<4, kQ8>(q, qs, t, hd, pf, sc);
            break;
          case 5:
            Scores<5, kQ8>(q, qs, t, hd, pf, sc);
            break;
          default:
            Scores<6, kQ8>(q, qs, t, hd, pf, sc);
            break;
        }
      }
      // The rows' maxima and corrections as lanes of one vector each, then
      // each row's probabilities, then their sums (rows as lanes again).
      int32_t a[kScoreRows], z[kScoreRows];
      StepLanes(b, lo, hi, t0, rg, nr, a, z);
      const __m512 mx = StepMaxRows(sc, nr, a, z, b.softcap, m + rg, corr + rg);
      __m512 sums[kScoreRows];
      for (int k = 0; k < nr; ++k) {
        float* s = S + int64_t(rg + k) * kFlashStep;
        const __m512 mxv = LaneOf(mx, k);
        __m512 p[kFlashStepTiles];
        for (int c = 0; c < kFlashStepTiles; ++c) {
          p[c] = ExpNonPositive16(_mm512_sub_ps(sc[k][c], mxv));
          _mm512_storeu_ps(s + c * kFlashTile, kQ8 ? _mm512_mul_ps(p[c], t.vscale[c]) : p[c]);
        }
        sums[k] = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
      }
      AddRowSums(sums, nr, corr + rg, l + rg);
    });
    // Values.
    ForRowGroups(r0, r1, kValueRows, [&](int rg, int nr) {
      float* out[kValueRows];
      for (int i = 0; i < nr; ++i) out[i] = o + int64_t(rg + i) * hd;
      const float* p = S + int64_t(rg) * kFlashStep;
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      switch (nr) {
        case 1:
          Values<1, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf);
          break;
        case 2:
          Values<2, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf);
          break;
        case 3:
          Values<3, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf);
          break;
        default:
          Values<4, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf);
          break;
      }
    });
  }
}

void FlashChunkAny(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  if (b.k8 != nullptr) return FlashChunk<true>(b, lo, hi, m, l, o, scratch);
  FlashChunk<false>(b, lo, hi, m, l, o, scratch);
}

}  // namespace
}  // namespace infera::avx512
