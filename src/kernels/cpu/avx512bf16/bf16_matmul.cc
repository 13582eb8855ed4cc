// Float-weight matmuls with bf16 products (KernelTable::bf16_tile_*,
// Bf16TileFn's definition in kernels.h): 4 weight rows × up to 6 tokens,
// one 16-lane accumulator each, VDPBF16PS over steps of 32 elements. The
// weights are rounded to bf16 in registers as they are loaded (F32: two
// VCVTNEPS2BF16 halves; F16: widened to f32 first, exact; BF16: as stored),
// the activations come rounded once per matmul (round_bf16). Compiled with
// AVX-512 F/BW/VL/DQ and BF16.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512/reduce512.h"
#include "kernels/cpu/avx512bf16/bf16_kernels.h"

namespace infera::avx512bf16 {
namespace {

inline __m512bh Bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// 32 weights as bf16 in element order (word j = element j, so VDPBF16PS
// lane l takes elements 2 l and 2 l + 1).
inline __m512bh LoadF32(const uint8_t* p) {
  return _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 64), _mm512_loadu_ps(p));
}
inline __m512bh MaskLoadF32(const uint8_t* p, __mmask32 m) {
  const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p);
  const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), p + 64);
  return _mm512_cvtne2ps_pbh(hi, lo);
}
inline __m512bh F16Words(__m512i h) {
  return _mm512_cvtne2ps_pbh(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)),
                             _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
}
inline __m512bh LoadF16(const uint8_t* p) { return F16Words(_mm512_loadu_si512(p)); }
inline __m512bh MaskLoadF16(const uint8_t* p, __mmask32 m) { return F16Words(_mm512_maskz_loadu_epi16(m, p)); }
// Stored bf16 is its own rounding (a denormal weight reads as zero in
// VDPBF16PS, as the definition's rounding makes it).
inline __m512bh LoadBf16(const uint8_t* p) { return Bh(_mm512_loadu_si512(p)); }
inline __m512bh MaskLoadBf16(const uint8_t* p, __mmask32 m) { return Bh(_mm512_maskz_loadu_epi16(m, p)); }

constexpr int kPrefetchBytes = 512;

template <int kT, int kEsz, __m512bh (*Load)(const uint8_t*), __m512bh (*MaskLoad)(const uint8_t*, __mmask32)>
void Tile(const uint8_t* w, size_t row_bytes, int nr, const uint16_t* x, int64_t ldx, int64_t n, float* y,
          int64_t ldy) {
  const uint8_t* rows[4];
  for (int r = 0; r < 4; ++r) rows[r] = w + (r < nr ? r : 0) * row_bytes;
  __m512 acc[4][kT];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // Decode: fetch ahead within each row and the next tile's rows, as the
  // f32 tile does (avx512_kernels.cc).
  const uint8_t* next = w + 4 * row_bytes;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh wv[4];
    if constexpr (kT == 1) {
#pragma GCC unroll 8
      for (int c = 0; c < 2 * kEsz; ++c) {
        _mm_prefetch(reinterpret_cast<const char*>(next + 4 * i * kEsz + 64 * c), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      if constexpr (kT == 1) {
#pragma GCC unroll 2
        for (int c = 0; c < kEsz / 2; ++c) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i * kEsz + kPrefetchBytes + 64 * c), _MM_HINT_T0);
        }
      }
      wv[r] = Load(rows[r] + i * kEsz);
    }
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) {
      const __m512bh xv = Bh(_mm512_loadu_si512(x + t * ldx + i));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], xv, wv[r]);
    }
  }
  if (i < n) {  // x is zero past n (ldx >= RoundUpToBf16Step(n))
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    __m512bh wv[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) wv[r] = MaskLoad(rows[r] + i * kEsz, m);
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) {
      const __m512bh xv = Bh(_mm512_loadu_si512(x + t * ldx + i));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], xv, wv[r]);
    }
  }
  float sums[4][kT];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) sums[r][t] = avx512::Sum(acc[r][t]);
  }
  for (int r = 0; r < nr; ++r) {
    for (int t = 0; t < kT; ++t) y[t * ldy + r] = sums[r][t];
  }
}

template <int kEsz, __m512bh (*Load)(const uint8_t*), __m512bh (*MaskLoad)(const uint8_t*, __mmask32)>
void Bf16Tile(const uint8_t* w, size_t row_bytes, int nr, const uint16_t* x, int64_t ldx, int nt, int64_t n, float* y,
              int64_t ldy) {
  switch (nt) {
    case 6: return Tile<6, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
    case 5: return Tile<5, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
    case 4: return Tile<4, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
    case 3: return Tile<3, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
    case 2: return Tile<2, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
    default: return Tile<1, kEsz, Load, MaskLoad>(w, row_bytes, nr, x, ldx, n, y, ldy);
  }
}

void RoundBf16(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), h);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

void RowToBf16(DType t, const uint8_t* row, int64_t n, uint16_t* y) {
  if (t == DType::kF32) return RoundBf16(reinterpret_cast<const float*>(row), n, y);
  if (t == DType::kBF16) {  // stored bf16 is its own rounding, denormals aside
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      y[i] = (h & 0x7F80u) == 0 ? static_cast<uint16_t>(h & 0x8000u) : (h & 0x7FFFu) > 0x7F80u ? h | 0x40u : h;
    }
    return;
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  }
}

}  // namespace

void FillMatmul(KernelTable* t) {
  t->bf16_tile_f32 = Bf16Tile<4, LoadF32, MaskLoadF32>;
  t->bf16_tile_f16 = Bf16Tile<2, LoadF16, MaskLoadF16>;
  t->bf16_tile_bf16 = Bf16Tile<2, LoadBf16, MaskLoadBf16>;
  t->round_bf16 = RoundBf16;
  t->row_to_bf16 = RowToBf16;
  t->matmul_bf16_variant = "avx512bf16-dpbf16";
}

}  // namespace infera::avx512bf16
