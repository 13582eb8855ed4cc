// The tiled attention chunk kernel with bf16 products (FlashChunkFn's bf16
// form) in AVX512-BF16: the operations of FlashChunkGenericBf16 per row, in
// its order, with VDPBF16PS doing two products per lane.
//
// Per step of 64 positions the f32 cache's K and V are rounded once into
// pair layouts every row of the block then reads from L1:
//   K: per tile of 16 lanes and pair of dimensions (d, d + 1), one vector of
//      16 dwords (k_j[d], k_j[d + 1]): scores of 6 rows × 64 lanes as in the
//      f32 kernel, one VDPBF16PS per row, tile and pair of dimensions;
//   V: per pair of positions (j, j + 1) and 16 output elements, one vector
//      of 16 dwords (v_j[e], v_j+1[e]): one broadcast dword of probabilities
//      (p_j, p_j+1) per row and pair.
// Queries are rounded once per call, probabilities once per step and row.
//
// Included by the AVX512-BF16 level (bf16_flash.cc) and, with the bf16
// instructions emulated (bf16_generic.h's operations on 16 lanes), by the
// AVX-512 level for CPUs without AVX512-BF16 (avx512_flash_bf16.cc):
// internal linkage, each file compiles its own copy with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512/flash_slots512.h"
#include "kernels/cpu/avx512/softmax512.h"
#include "kernels/flash_generic.h"

namespace infera::flash_bf16_512 {
namespace {

using avx512::AddRowSums;
using avx512::ExpNonPositive16;
using avx512::LaneOf;
using avx512::StepLanes;
using avx512::StepMaxRows;

constexpr int kScoreRows = 6;  // rows per score block: 24 accumulators
constexpr int kValueRows = 4;  // rows per value block: 16 accumulators

inline __mmask16 FirstLanes(int n) { return n <= 0 ? 0 : n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

#ifdef __AVX512BF16__
// The bf16 words of lo [16] and hi [16] interleaved: dword i = (lo[i], hi[i])
// (lo in the low half, the pair's even element).
inline __m512i PairUp(__m512 lo, __m512 hi) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // words 0..15 lo, 16..31 hi
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), words);
}

// Words 0..15: lo rounded to bf16, 16..31: hi (VCVTNE2PS2BF16).
inline __m512i RoundTwo(__m512 hi, __m512 lo) { return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)); }

// One VDPBF16PS: per lane acc + a.hi * b.hi + a.lo * b.lo (DotBf16Pair).
inline __m512 Dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}
// The accumulator as VDPBF16PS reads it (it reads denormals as zeros itself).
inline __m512 AccIn(__m512 acc) { return acc; }
#else
// Without AVX512-BF16 (Ice Lake class) the same operations emulated:
// Bf16Round, FlushDenormal and DotBf16Pair (bf16_generic.h) on 16 lanes.
inline __m512i I32x16(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// Bf16Round of each lane, in its low 16 bits.
inline __m512i Bf16Bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i top = _mm512_srli_epi32(u, 16);
  const __mmask16 den = _mm512_testn_epi32_mask(u, I32x16(0x7F800000u));  // zero / denormal
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, I32x16(0x7FFFFFFFu)), I32x16(0x7F800000u));
  const __m512i odd = _mm512_and_si512(top, I32x16(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, I32x16(0x7FFFu)), odd), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, I32x16(0x40u)));
  return _mm512_mask_mov_epi32(r, den, _mm512_and_si512(top, I32x16(0x8000u)));
}
inline __m512i PairUp(__m512 lo, __m512 hi) {
  return _mm512_or_si512(Bf16Bits(lo), _mm512_slli_epi32(Bf16Bits(hi), 16));
}
inline __m512i RoundTwo(__m512 hi, __m512 lo) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(Bf16Bits(lo))),
                            _mm512_cvtepi32_epi16(Bf16Bits(hi)), 1);
}
// FlushDenormal: zero and denormal lanes become zeros of their sign.
inline __m512 Flush16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 den = _mm512_testn_epi32_mask(u, I32x16(0x7F800000u));
  return _mm512_castsi512_ps(_mm512_mask_and_epi32(u, den, u, I32x16(0x80000000u)));
}
// DotBf16Pair per lane, the accumulator already flushed (AccIn, or a
// previous Dp's result): the odd (high) products first.
inline __m512 Dp(__m512 acc, __m512i a, __m512i b) {
  const __m512i hi = I32x16(0xFFFF0000u);
  acc = Flush16(
      _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(a, hi)), _mm512_castsi512_ps(_mm512_and_si512(b, hi)), acc));
  return Flush16(_mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)),
                                 _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), acc));
}
inline __m512 AccIn(__m512 acc) { return Flush16(acc); }
#endif  // __AVX512BF16__

// f32 probabilities rounded to bf16 and back.
inline __m512 Widen(__m256i bf16) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16)); }

// A bf16 cache's next step: the K pair tiles and V pair rows of the 16-slot
// groups holding positions t0, t0 + 16, t0 + 32, t0 + 48, prefetched a line
// at a time inside this step's loops (as the f32 kernel does). Null: none.
struct NextStep {
  const char* k[kFlashStepTiles];  // tile c: [hd2][16] dwords
  const char* v[kFlashStepTiles];  // tile c's 8 pairs: [8][nch][16] dwords
};

// s[r][c] = scores of rows with query pairs qp[r] [hd2] against tile c of
// the step's K pairs kt[c] [hd2][16], times scale.
template <int kR>
void Scores(const uint32_t* const* qp, const uint32_t* const* kt, int hd2, float scale, const NextStep* next,
            __m512 (*s)[kFlashStepTiles]) {
  __m512 acc[kR][kFlashStepTiles];
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int dp = 0; dp < hd2; ++dp) {
    __m512i kv[kFlashStepTiles];
    for (int c = 0; c < kFlashStepTiles; ++c) kv[c] = _mm512_loadu_si512(kt[c] + dp * 16);
    if (next != nullptr) {
      for (int c = 0; c < kFlashStepTiles; ++c) _mm_prefetch(next->k[c] + dp * 64, _MM_HINT_T0);
    }
    for (int r = 0; r < kR; ++r) {
      const __m512i qd = _mm512_set1_epi32(static_cast<int>(qp[r][dp]));
      for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = Dp(acc[r][c], qd, kv[c]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_mul_ps(acc[r][c], sc);
  }
}

// o rows (kR) = o * corr, then over the pairs [jp0, jp1] of the step's V
// pairs vt[jp] [nch][16] dwords, o = dp(o, (p_j, p_j+1), (v_j, v_j+1)) on
// kC 16-float chunks from chunk c0; pp rows of 32 probability dwords.
template <int kR, int kC>
void ValuesChunks(float* const* orow, const float* corr, const uint32_t* const* pp, const uint32_t* const* vt, int jp0,
                  int jp1, int c0, int hd, const NextStep* next) {
  __m512 acc[kR][kC];
  __mmask16 m[kC];
  for (int c = 0; c < kC; ++c) m[c] = FirstLanes(hd - 16 * (c0 + c));
  for (int r = 0; r < kR; ++r) {
    const __m512 cr = _mm512_set1_ps(corr[r]);
    for (int c = 0; c < kC; ++c) {
      acc[r][c] = AccIn(_mm512_mul_ps(_mm512_maskz_loadu_ps(m[c], orow[r] + 16 * (c0 + c)), cr));
    }
  }
  const int nch = (hd + 15) / 16;
  for (int jp = jp0; jp <= jp1; ++jp) {
    if (next != nullptr) {
      const char* pair = next->v[jp / (kFlashTile / 2)] + int64_t(jp % (kFlashTile / 2)) * nch * 64;
      for (int c = 0; c < kC; ++c) _mm_prefetch(pair + (c0 + c) * 64, _MM_HINT_T0);
    }
    __m512i v[kC];
    for (int c = 0; c < kC; ++c) v[c] = _mm512_loadu_si512(vt[jp] + (c0 + c) * 16);
    for (int r = 0; r < kR; ++r) {
      const __m512i pj = _mm512_set1_epi32(static_cast<int>(pp[r][jp]));
      for (int c = 0; c < kC; ++c) acc[r][c] = Dp(acc[r][c], pj, v[c]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kC; ++c) _mm512_mask_storeu_ps(orow[r] + 16 * (c0 + c), m[c], acc[r][c]);
  }
}

template <int kR>
void Values(float* const* orow, const float* corr, const uint32_t* const* pp, const uint32_t* const* vt, int nch,
            int jp0, int jp1, int hd, const NextStep* next) {
  for (int c0 = 0; c0 < nch; c0 += 4) {
    switch (std::min(4, nch - c0)) {
      case 1:
        ValuesChunks<kR, 1>(orow, corr, pp, vt, jp0, jp1, c0, hd, next);
        break;
      case 2:
        ValuesChunks<kR, 2>(orow, corr, pp, vt, jp0, jp1, c0, hd, next);
        break;
      case 3:
        ValuesChunks<kR, 3>(orow, corr, pp, vt, jp0, jp1, c0, hd, next);
        break;
      default:
        ValuesChunks<kR, 4>(orow, corr, pp, vt, jp0, jp1, c0, hd, next);
        break;
    }
  }
}

inline uint32_t* AlignUp(float* p) {
  const uintptr_t u = (reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63);
  return reinterpret_cast<uint32_t*>(u);
}

// Prefetches an f32 cache's K groups and V rows of the positions [t0, t1]
// into L2 so that the next step's preparation does not wait on L3 / memory
// (it reads them in one burst, when it rounds them into pairs).
inline void PrefetchLines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
}
inline void PrefetchPositionsF32(const FlashBlock& b, int32_t t0, int32_t t1) {
  const int hd = b.head_dim;
  for (int32_t t = t0; t <= t1; ++t) {
    const int32_t slot = b.slots[t], base = slot - slot % kFlashTile;
    PrefetchLines(b.v + int64_t(slot) * hd, int64_t(hd) * 4);
    if (t == t0 || slot == base) PrefetchLines(b.k + FlashKIndex(base, 0, hd), int64_t(hd) * 64);
  }
}

// The step's K pair tile c, lanes [a, z] read (positions t0 + c * 16 + j at
// slots[j]): a bf16 cache's group in place when those lanes are
// consecutive slots of one group, else gathered into buf [hd2][16]
// (unread lanes 0); an f32 cache's tile (FlashKTile) rounded into buf.
const uint32_t* KPairTile(const FlashBlock& b, const int32_t* slots, int a, int z, uint32_t* buf, float* fbuf) {
  const int hd = b.head_dim, hd2 = FlashK16Pairs(hd);
  if (b.k16 != nullptr) {
    const int32_t base = slots[a] - a;
    bool in_place = base % kFlashTile == 0;
    for (int j = a; j <= z && in_place; ++j) in_place = slots[j] == base + j;
    if (in_place) return reinterpret_cast<const uint32_t*>(b.k16 + FlashK16Index(base, 0, hd));
    std::fill(buf, buf + int64_t(hd2) * 16, 0u);
    for (int j = a; j <= z; ++j) {  // the pair (2dp, 2dp + 1) of slot j: two bf16 words, one dword
      for (int dp = 0; dp < hd2; ++dp) std::memcpy(buf + dp * 16 + j, b.k16 + FlashK16Index(slots[j], 2 * dp, hd), 4);
    }
    return buf;
  }
  const float* kt = FlashKTile(b.k, slots, a, z, hd, fbuf);
  for (int dp = 0; dp < hd2; ++dp) {
    const __m512 k0 = _mm512_loadu_ps(kt + 2 * dp * 16);
    const __m512 k1 = 2 * dp + 1 < hd ? _mm512_loadu_ps(kt + (2 * dp + 1) * 16) : _mm512_setzero_ps();
    _mm512_store_si512(buf + dp * 16, PairUp(k0, k1));
  }
  return buf;
}

// The V pair of lanes (j, j + 1), each read when `read0` / `read1`: a bf16
// cache's pair in place when both are read and sit at slots (2s, 2s + 1),
// else built in buf [nch][16] (unread lanes 0).
const uint32_t* VPair(const FlashBlock& b, int32_t s0, int32_t s1, bool read0, bool read1, uint32_t* buf) {
  const int hd = b.head_dim, nch = (hd + 15) / 16;
  if (b.v16 != nullptr) {
    const uint32_t* v = reinterpret_cast<const uint32_t*>(b.v16);
    if (read0 && read1 && s0 % 2 == 0 && s1 == s0 + 1) return v + FlashV16Index(s0, 0, hd) / 2;
    uint16_t* w = reinterpret_cast<uint16_t*>(buf);
    std::fill(w, w + int64_t(nch) * 32, uint16_t{0});
    for (int d = 0; d < hd; ++d) {
      if (read0) w[2 * d] = b.v16[FlashV16Index(s0, d, hd)];
      if (read1) w[2 * d + 1] = b.v16[FlashV16Index(s1, d, hd)];
    }
    return buf;
  }
  const float* v0 = read0 ? b.v + int64_t(s0) * hd : nullptr;
  const float* v1 = read1 ? b.v + int64_t(s1) * hd : nullptr;
  for (int c = 0; c < nch; ++c) {
    const __mmask16 mk = FirstLanes(hd - 16 * c);
    const __m512 a = v0 != nullptr ? _mm512_maskz_loadu_ps(mk, v0 + 16 * c) : _mm512_setzero_ps();
    const __m512 z = v1 != nullptr ? _mm512_maskz_loadu_ps(mk, v1 + 16 * c) : _mm512_setzero_ps();
    _mm512_store_si512(buf + c * 16, PairUp(a, z));
  }
  return buf;
}

template <typename Fn>
void ForRowGroups(int r0, int r1, int n, Fn&& fn) {
  for (int r = r0; r < r1; r += n) fn(r, std::min(n, r1 - r));
}

void FlashChunkBf16(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  const int hd2 = (hd + 1) / 2, nch = (hd + 15) / 16;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  const int R = b.rows();
  // Scratch (FlashChunkScratchFloats): pair buffers 64-byte aligned.
  uint32_t* kp = AlignUp(scratch);                                             // [4][hd2][16] K pairs
  uint32_t* vp = kp + int64_t(kFlashStepTiles) * hd2 * 16;                     // [32][nch][16] V pairs
  uint32_t* qp = vp + int64_t(kFlashStep / 2) * nch * 16;                      // [R][hd2] query pairs
  uint32_t* pp = qp + int64_t(R) * hd2;                                        // [R][32] probability pairs
  float* corr = reinterpret_cast<float*>(pp + int64_t(R) * (kFlashStep / 2));  // [R]
  float* kbuf = corr + R;                                                      // [hd][16] a gathered f32 K tile
  uint32_t* zeros = AlignUp(kbuf + int64_t(hd) * kFlashTile);                  // [hd2][16] the K of unread tiles
  std::fill(zeros, zeros + int64_t(hd2) * 16, 0u);
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  for (int r = ia * g; r < ib * g; ++r) {  // queries rounded into pairs
    const float* q = b.q + (r / g) * b.q_stride + (r % g) * hd;
    for (int d0 = 0; d0 < hd; d0 += 32) {  // 32 consecutive floats -> 16 pairs
      const __m512 a = _mm512_maskz_loadu_ps(FirstLanes(hd - d0), q + d0);
      const __m512 z = _mm512_maskz_loadu_ps(FirstLanes(hd - d0 - 16), q + d0 + 16);
      const __m512i w = RoundTwo(z, a);
      _mm512_mask_storeu_epi32(qp + int64_t(r) * hd2 + d0 / 2, FirstLanes(hd2 - d0 / 2), w);
    }
  }
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  int ta = ia, tb = ia;
  NextStep next;
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashStep - 1) ++tb;
    if (ta >= tb) continue;
    const int j0 = std::max(ulo, t0) - t0, j1 = std::min(uhi, t0 + kFlashStep - 1) - t0;
    const int32_t* slots = b.slots + t0;
    // Per tile: the K pairs of the step's read lanes (tiles with none:
    // zeros) and the V pairs covering [j0, j1] (lanes outside: zeros). A
    // bf16 cache's whole group is read in place: its K tile and its 8 V pairs
    // with one vector check of its slots, the pointers KPairTile and VPair
    // would return.
    const int jp0 = j0 / 2, jp1 = j1 / 2;
    const uint32_t* kt[kFlashStepTiles];
    const uint32_t* vt[kFlashStep / 2];
    for (int c = 0; c < kFlashStepTiles; ++c) {
      const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
      int32_t base = 0;
      if (b.k16 != nullptr && WholeGroup(slots, c, j0, j1, &base)) {
        kt[c] = reinterpret_cast<const uint32_t*>(b.k16 + FlashK16Index(base, 0, hd));
        const uint32_t* v = reinterpret_cast<const uint32_t*>(b.v16) + FlashV16Index(base, 0, hd) / 2;
        for (int k = 0; k < kFlashTile / 2; ++k) vt[c0 / 2 + k] = v + int64_t(k) * FlashV16Width(hd);
        continue;
      }
      kt[c] = a > z ? zeros : KPairTile(b, slots + c0, a, z, kp + int64_t(c) * hd2 * 16, kbuf);
      for (int jp = std::max(jp0, c0 / 2); jp <= std::min(jp1, c0 / 2 + kFlashTile / 2 - 1); ++jp) {
        const int j = 2 * jp;
        const bool read0 = j >= j0, read1 = j + 1 <= j1;
        vt[jp] = VPair(b, read0 ? slots[j] : 0, read1 ? slots[j + 1] : 0, read0, read1, vp + int64_t(jp) * nch * 16);
      }
    }
    // The next step's positions, in the next chunk too (up to the block's
    // last position: its slots exist). A bf16 cache's step is read in place
    // by the loops, which prefetch the next one as they go; an f32 cache's
    // is read at once by the rounding above, so it is prefetched at once.
    const int32_t block_end = b.last[b.nq - 1];
    const bool prefetch = t0 + kFlashStep <= block_end;
    const NextStep* step_pf = nullptr;  // for the step's first row group only
    if (prefetch && b.k16 != nullptr) {
      for (int c = 0; c < kFlashStepTiles; ++c) {
        const int32_t slot = b.slots[std::min(block_end, t0 + kFlashStep + c * kFlashTile)];
        const int64_t group = slot - slot % kFlashTile;
        next.k[c] = reinterpret_cast<const char*>(b.k16 + FlashK16Index(group, 0, hd));
        next.v[c] = reinterpret_cast<const char*>(b.v16 + FlashV16Index(group, 0, hd));
      }
      step_pf = &next;
    } else if (prefetch) {
      PrefetchPositionsF32(b, t0 + kFlashStep, std::min(block_end, t0 + 2 * kFlashStep - 1));
    }
    const int r0 = ta * g, r1 = tb * g;
    // Scores and the online softmax.
    ForRowGroups(r0, r1, kScoreRows, [&](int rg, int nr) {
      const uint32_t* q[kScoreRows];
      for (int i = 0; i < nr; ++i) q[i] = qp + int64_t(rg + i) * hd2;
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      __m512 sc[kScoreRows][kFlashStepTiles];
      switch (nr) {
        case 1:
          Scores<1>(q, kt, hd2, b.scale, pf, sc);
          break;
        case 2:
          Scores<2>(q, kt, hd2, b.scale, pf, sc);
          break;
        case 3:
          Scores<3>(q, kt, hd2, b.scale, pf, sc);
          break;
        case 4:
          Scores<4>(q, kt, hd2, b.scale, pf, sc);
          break;
        case 5:
          Scores<5>(q, kt, hd2, b.scale, pf, sc);
          break;
        default:
          Scores<6>(q, kt, hd2, b.scale, pf, sc);
          break;
      }
      // The rows' maxima and corrections as lanes of one vector each, then
      // each row's probabilities, then their sums (rows as lanes again).
      int32_t a[kScoreRows], z[kScoreRows];
      StepLanes(b, lo, hi, t0, rg, nr, a, z);
      const __m512 mx = StepMaxRows(sc, nr, a, z, b.softcap, m + rg, corr + rg);
      __m512 sums[kScoreRows];
      for (int k = 0; k < nr; ++k) {
        const __m512 mxv = LaneOf(mx, k);
        __m512 p[kFlashStepTiles];
        for (int c = 0; c < kFlashStepTiles; c += 2) {
          const __m512 e0 = ExpNonPositive16(_mm512_sub_ps(sc[k][c], mxv));
          const __m512 e1 = ExpNonPositive16(_mm512_sub_ps(sc[k][c + 1], mxv));
          const __m512i w = RoundTwo(e1, e0);  // 32 bf16 in lane order
          _mm512_storeu_si512(pp + int64_t(rg + k) * (kFlashStep / 2) + c * kFlashTile / 2, w);
          p[c] = Widen(_mm512_castsi512_si256(w));
          p[c + 1] = Widen(_mm512_extracti64x4_epi64(w, 1));
        }
        sums[k] = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
      }
      AddRowSums(sums, nr, corr + rg, l + rg);
    });
    // Values.
    ForRowGroups(r0, r1, kValueRows, [&](int rg, int nr) {
      float* out[kValueRows];
      const uint32_t* prow[kValueRows];
      for (int i = 0; i < nr; ++i) {
        out[i] = o + int64_t(rg + i) * hd;
        prow[i] = pp + int64_t(rg + i) * (kFlashStep / 2);
      }
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      switch (nr) {
        case 1:
          Values<1>(out, corr + rg, prow, vt, nch, jp0, jp1, hd, pf);
          break;
        case 2:
          Values<2>(out, corr + rg, prow, vt, nch, jp0, jp1, hd, pf);
          break;
        case 3:
          Values<3>(out, corr + rg, prow, vt, nch, jp0, jp1, hd, pf);
          break;
        default:
          Values<4>(out, corr + rg, prow, vt, nch, jp0, jp1, hd, pf);
          break;
      }
    });
  }
}

}  // namespace
}  // namespace infera::flash_bf16_512
