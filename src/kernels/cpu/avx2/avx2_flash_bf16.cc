// The tiled attention kernel with bf16 products (FlashChunkFn's bf16 form:
// `--attn-dtype bf16` and bf16 KV caches) in AVX2, for CPUs without
// AVX512-BF16: FlashChunkGenericBf16's operations in the same order per
// row, on 8 lanes. A VDPBF16PS lane is two fused multiply-adds, each result's
// denormals flushed to zero (Flush8: four integer operations), so this is
// a few times slower than f32 products, where the generic loops, one lane
// at a time through scalar bit tests, were 30 times slower.
//
// Per step: K rounded to bf16 into a lane-major buffer kr [head_dim][64]
// (scores as eight 8-lane FMA chains per row, lanes = positions), V rounded
// into vr [64][head_dim] (values as up to 64 output elements per row in
// registers). A bf16 cache is unpacked (its values are already rounded);
// an f32 cache is rounded here.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/bf16_generic.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/exp256.h"
#include "kernels/cpu/avx2/flash_slots256.h"
#include "kernels/cpu/avx2/softmax256.h"
#include "kernels/flash_bf16_generic.h"

namespace infera::avx2 {
namespace {

inline __m256i I32(int32_t v) { return _mm256_set1_epi32(v); }

// FlushDenormal: zero and denormal lanes become zeros of their sign.
inline __m256 Flush8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, I32(0x7F800000)), _mm256_setzero_si256());
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(den, I32(0x7FFFFFFF)), u));
}

// RoundToBf16 (Bf16Round, as f32): round to nearest even, denormals to
// signed zeros, NaNs quieted.
inline __m256 RoundBf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, I32(0x7F800000)), _mm256_setzero_si256());
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, I32(0x7FFFFFFF)), I32(0x7F800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), I32(1));
  const __m256i hi = I32(static_cast<int32_t>(0xFFFF0000u));
  __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, I32(0x7FFF)), odd), hi);
  r = _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_or_si256(u, I32(0x00400000)), hi), nan);
  r = _mm256_blendv_epi8(r, _mm256_and_si256(u, I32(static_cast<int32_t>(0x80000000u))), den);
  return _mm256_castsi256_ps(r);
}

// bf16 pairs (lo 16 bits: element a, hi: element b) as f32.
inline __m256 PairLo(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
inline __m256 PairHi(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, I32(static_cast<int32_t>(0xFFFF0000u))));
}

// kr [hd][64] = the step's K rounded to bf16, lane-major; lanes outside
// [j0, j1] any finite value or 0 (their scores are masked). kbuf: [4][hd][16]
// for gathered f32 tiles.
void LoadK(const FlashBlock& b, const int32_t* slots, int j0, int j1, float* kbuf, float* kr) {
  const int hd = b.head_dim;
  for (int c = 0; c < kFlashStepTiles; ++c) {
    const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
    if (a > z) {  // no lane read
      for (int d = 0; d < hd; ++d) {
        _mm256_storeu_ps(kr + d * kFlashStep + c0, _mm256_setzero_ps());
        _mm256_storeu_ps(kr + d * kFlashStep + c0 + 8, _mm256_setzero_ps());
      }
      continue;
    }
    if (b.k16 == nullptr) {
      const float* kt = FlashKTile(b.k, slots + c0, a, z, hd, kbuf + int64_t(c) * kFlashTile * hd);
      for (int d = 0; d < hd; ++d) {
        _mm256_storeu_ps(kr + d * kFlashStep + c0, RoundBf16x8(_mm256_loadu_ps(kt + d * kFlashTile)));
        _mm256_storeu_ps(kr + d * kFlashStep + c0 + 8, RoundBf16x8(_mm256_loadu_ps(kt + d * kFlashTile + 8)));
      }
      continue;
    }
    int32_t base = 0;
    if (WholeGroup(slots, c, j0, j1, &base)) {  // [hd / 2][16][2] in place
      const uint16_t* g = b.k16 + FlashK16Index(base, 0, hd);
      for (int pd = 0; pd < hd / 2; ++pd) {
        for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + (pd * kFlashTile + 8 * h) * 2));
          _mm256_storeu_ps(kr + (2 * pd) * kFlashStep + c0 + 8 * h, PairLo(w));
          _mm256_storeu_ps(kr + (2 * pd + 1) * kFlashStep + c0 + 8 * h, PairHi(w));
        }
      }
      continue;
    }
    for (int j = c0; j < c0 + kFlashTile; ++j) {  // element by element
      const bool seen = j >= j0 && j <= j1;
      for (int d = 0; d < hd; ++d) {
        kr[d * kFlashStep + j] = seen ? Bf16ToF32(b.k16[FlashK16Index(slots[j], d, hd)]) : 0.0f;
      }
    }
  }
}

// vr [64][hd]: rows j in [j0, j1] = V of lane j rounded to bf16.
void LoadV(const FlashBlock& b, const int32_t* slots, int j0, int j1, float* vr) {
  const int hd = b.head_dim;
  for (int j = j0; j <= j1; ++j) {
    float* row = vr + int64_t(j) * hd;
    const int64_t slot = slots[j];
    if (b.v16 == nullptr) {
      const float* v = b.v + slot * hd;
      for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(row + d, RoundBf16x8(_mm256_loadu_ps(v + d)));
      continue;
    }
    // Pairs of slots: element d of slot s at ((s / 2) * width + d) * 2 + s % 2.
    const uint16_t* pair = b.v16 + FlashV16Index(slot - slot % 2, 0, hd);
    for (int d = 0; d < hd; d += 8) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair + 2 * d));
      _mm256_storeu_ps(row + d, slot % 2 == 0 ? PairLo(w) : PairHi(w));
    }
  }
}

// s [8] = the row's scaled scores against kr: per lane, over pairs (d, d +
// 1), acc = Flush(fma(q[d + 1], k[d + 1], acc)), then Flush(fma(q[d], k[d],
// acc)) (DotBf16Pair; acc starts at 0 and stays flushed), times scale.
__attribute__((noinline)) void RowScores(const float* qr, const float* kr, int hd, float scale, __m256* s) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int d = 0; d < hd; d += 2) {
    const float* k1 = kr + (d + 1) * kFlashStep;
    const float* k0 = kr + d * kFlashStep;
    const __m256 q1 = _mm256_broadcast_ss(qr + d + 1), q0 = _mm256_broadcast_ss(qr + d);
    a0 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1), a0));
    a1 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 8), a1));
    a2 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 16), a2));
    a3 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 24), a3));
    a4 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 32), a4));
    a5 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 40), a5));
    a6 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 48), a6));
    a7 = Flush8(_mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + 56), a7));
    a0 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0), a0));
    a1 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 8), a1));
    a2 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 16), a2));
    a3 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 24), a3));
    a4 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 32), a4));
    a5 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 40), a5));
    a6 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 48), a6));
    a7 = Flush8(_mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 56), a7));
  }
  static_assert(kStepVecs == 8);
  const __m256 sc = _mm256_set1_ps(scale);
  const __m256 acc[kStepVecs] = {a0, a1, a2, a3, a4, a5, a6, a7};
  for (int v = 0; v < kStepVecs; ++v) s[v] = _mm256_mul_ps(acc[v], sc);
}

// orow[d0, d0 + 8 kV) = Flush(orow * corr), then over the pairs of lanes
// (j, j + 1), j even, covering [r0, r1]: o = Flush(fma(p_j+1, v_j+1, o)),
// then Flush(fma(p_j, v_j, o)) (a lane outside [r0, r1]: p = 0, v = 0).
template <int kV>
__attribute__((noinline)) void RowValues(float* orow, float corr, const float* p, const float* vr, const float* zero,
                                         int r0, int r1, int d0, int hd) {
  __m256 acc[kV];
  const __m256 cv = _mm256_set1_ps(corr);
#pragma GCC unroll 8
  for (int i = 0; i < kV; ++i) acc[i] = Flush8(_mm256_mul_ps(_mm256_loadu_ps(orow + d0 + 8 * i), cv));
  for (int j = r0 & ~1; j <= r1; j += 2) {
    const float* v0 = j >= r0 ? vr + int64_t(j) * hd + d0 : zero;
    const float* v1 = j + 1 <= r1 ? vr + int64_t(j + 1) * hd + d0 : zero;
    const __m256 p0 = _mm256_broadcast_ss(p + j), p1 = _mm256_broadcast_ss(p + j + 1);
#pragma GCC unroll 8
    for (int i = 0; i < kV; ++i) {
      acc[i] = Flush8(_mm256_fmadd_ps(p1, _mm256_loadu_ps(v1 + 8 * i), acc[i]));
      acc[i] = Flush8(_mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * i), acc[i]));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kV; ++i) _mm256_storeu_ps(orow + d0 + 8 * i, acc[i]);
}

// One row's step (FlashChunkGenericBf16's operations for it).
void RowStep(const FlashBlock& b, const float* q, const float* kr, const float* vr, const float* zero, float* qr,
             int r0, int r1, float* m, float* l, float* orow) {
  const int hd = b.head_dim;
  for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(qr + d, RoundBf16x8(_mm256_loadu_ps(q + d)));
  __m256 s[kStepVecs];
  RowScores(qr, kr, hd, b.scale, s);
  if (b.softcap > 0) {  // (the lanes masked below too)
    for (int v = 0; v < kStepVecs; ++v) s[v] = SoftCap8(s[v], b.softcap);
  }
  MaskOutside(s, r0, r1);
  const float mx = std::max(*m, Max64(s));
  const float corr = ExpNonPositive(*m - mx);
  const __m256 mxv = _mm256_set1_ps(mx);
  alignas(32) float p[kFlashStep];
  __m256 pv[kStepVecs];
  for (int v = 0; v < kStepVecs; ++v) {
    pv[v] = RoundBf16x8(ExpNonPositive8(_mm256_sub_ps(s[v], mxv)));
    _mm256_store_ps(p + 8 * v, pv[v]);
  }
  *l = *l * corr + Sum64(pv);
  using RowValuesFn = void (*)(float*, float, const float*, const float*, const float*, int, int, int, int);
  static constexpr RowValuesFn kRowValues[8] = {RowValues<1>, RowValues<2>, RowValues<3>, RowValues<4>,
                                                RowValues<5>, RowValues<6>, RowValues<7>, RowValues<8>};
  for (int d0 = 0; d0 < hd; d0 += 64) {  // 64 elements (8 vectors) per pass, the last pass what remains
    kRowValues[std::min(8, (hd - d0) / 8) - 1](orow, corr, p, vr, zero, r0, r1, d0, hd);
  }
  *m = mx;
}

// Head sizes that are not a multiple of 8 keep the generic kernel.
void FlashChunkBf16Avx2(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  if (hd % 8 != 0) return FlashChunkGenericBf16(b, lo, hi, m, l, o, scratch);
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  // Scratch (within FlashChunkScratchFloats): 272 (hd + 16) floats hold these.
  float* kbuf = scratch;                        // [4][hd][16] gathered f32 K tiles
  float* kr = kbuf + int64_t(kFlashStep) * hd;  // [hd][64]
  float* vr = kr + int64_t(kFlashStep) * hd;    // [64][hd]
  float* zero = vr + int64_t(kFlashStep) * hd;  // [hd]
  float* qr = zero + hd;                        // [hd]
  std::fill(zero, zero + hd, 0.0f);
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    const int j0 = std::max(0, ulo - t0), j1 = std::min(kFlashStep - 1, uhi - t0);
    const int32_t* slots = b.slots + t0;
    LoadK(b, slots, j0, j1, kbuf, kr);
    LoadV(b, slots, j0, j1, vr);
    for (int i = ia; i < ib; ++i) {
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      if (z < t0 || a > t0 + kFlashStep - 1) continue;  // the row does not see this step
      const int r0 = std::max(0, a - t0), r1 = std::min(kFlashStep - 1, z - t0);
      for (int h = 0; h < g; ++h) {
        const int r = i * g + h;
        RowStep(b, b.q + i * b.q_stride + h * hd, kr, vr, zero, qr, r0, r1, m + r, l + r, o + int64_t(r) * hd);
      }
    }
  }
}

}  // namespace

void FillFlashBf16(KernelTable* t) {
  t->flash_chunk_bf16 = FlashChunkBf16Avx2;
  t->flash_bf16_variant = "avx2 (bf16 products emulated)";
}

}  // namespace infera::avx2
