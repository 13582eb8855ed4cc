// The AVX-512 decode of one packed k-block (packed.h) into the registers the
// integer kernels multiply: shared by the VNNI kernel (vpdpbusd against
// broadcast activations) and the AMX kernel (the same vectors as a tile).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed.h"

namespace infera {
// Internal linkage: each ISA file instantiates its own copy with its flags.
namespace {

// 16 per-row scales (or mins) at p, as f32.
template <bool kF16>
inline __m512 LoadScales(const uint8_t* p) {
  if constexpr (kF16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_loadu_ps(p);
}

// One format's k-block decode. Quants: wv[c] (c < kVecs) holds u of
// elements 4c .. 4c+3 of each of the group's 16 rows (row r at bytes
// 4r .. 4r+3), the unsigned integers of weight = s * (u - 2^shift) + m.
// Scales: s and m (zero without mins) of the 16 rows, as f32, computed as
// the unpacker computes them.
template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut>
struct BlockDecode512 {
  static constexpr int kVecs = kBlock / 4;  // 4-element groups per block
  static constexpr int kLoads = kBits == 8 ? kVecs : kBits <= 3 ? 0 : kVecs / 2;
  static constexpr int kHigh = kBits == 5 || kBits == 6 ? kBits - 4 : 0;  // bits in the high-bit chunk
  using Geometry = PackedGeometry<kBits, kBlock, kMin, kF16, kFac>;
  static constexpr size_t sbytes = Geometry::kScaleBytes;

  __m512i lo, table;
  explicit BlockDecode512(const uint8_t* lut_u)
      : lo(_mm512_set1_epi8(0x0F)), table(_mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(lut_u)))) {}

  inline __attribute__((always_inline)) void Quants(const uint8_t* blk, __m512i* wv) const {
#pragma GCC unroll 8
    for (int c = 0; c < kLoads; ++c) {
      const __m512i raw = _mm512_load_si512(blk + 64 * c);
      if constexpr (kBits == 8) {
        wv[c] = raw;
      } else {
        wv[c] = _mm512_and_si512(raw, lo);
        wv[kLoads + c] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo);
      }
    }
    if constexpr (kBits <= 3) {  // Q2_K, Q3_K: vector v at bits [2v, 2v + 2) of each byte
      const __m512i raw = _mm512_loadu_si512(blk);  // Q3_K's odd blocks: 32-byte aligned
      const __m512i three = _mm512_set1_epi8(3);
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) wv[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * v), three);
      if constexpr (kBits == 3) {  // high bits: rows 0-7 at bit v, rows 8-15 at 4 + v, to bit 2
        const __m256i hb = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64));
        const __m512i x = _mm512_srlv_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(hb), hb, 1),
                                            _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1));
        const __m512i four = _mm512_set1_epi8(4);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) {
          const __m512i h = v < 2 ? _mm512_slli_epi16(x, 2 - v) : _mm512_srli_epi16(x, v - 2);
          wv[v] = _mm512_or_si512(wv[v], _mm512_and_si512(h, four));
        }
      }
    }
    if constexpr (kHigh > 0) {  // vector v's high bits, at [kHigh v, ...) of each byte, to bit 4
      const __m512i high = _mm512_load_si512(blk + kBlock * 8);
      const __m512i mask = _mm512_set1_epi8(static_cast<char>(((1 << kHigh) - 1) << 4));
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) {
        const int at = kHigh * v;
        const __m512i h = at >= 4 ? _mm512_srli_epi16(high, at - 4) : _mm512_slli_epi16(high, 4 - at);
        wv[v] = _mm512_or_si512(wv[v], _mm512_and_si512(h, mask));
      }
    }
    if constexpr (kLut) {  // codes -> u
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) wv[v] = _mm512_shuffle_epi8(table, wv[v]);
    }
  }

  inline __attribute__((always_inline)) void Scales(const uint8_t* sp, [[maybe_unused]] const uint8_t* super, __m512* s,
                                                    __m512* m) const {
    *m = _mm512_setzero_ps();
    if constexpr (kFac) {  // s = d * sc, m = -(dmin * mn), as the unpacker computes them
      auto u8 = [](const uint8_t* p) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        // Sub-scales: unsigned with mins (Q4_K, Q5_K), signed without (Q6_K).
        return _mm512_cvtepi32_ps(kMin ? _mm512_cvtepu8_epi32(v) : _mm512_cvtepi8_epi32(v));
      };
      if constexpr (kBits == 3) {  // Q3_K: 6-bit sc, low nibbles at r % 8, high 2 bits at 8 + r / 4
        uint64_t lo8;
        uint32_t hi4;
        std::memcpy(&lo8, sp, 8);
        std::memcpy(&hi4, sp + 8, 4);
        const __m512i lo4 = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_set1_epi64x(static_cast<int64_t>(lo8))),
                              _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
            _mm512_set1_epi32(15));
        const __m512i hi = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int32_t>(hi4)),
                              _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)),
            _mm512_set1_epi32(3));
        const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo4, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        *s = _mm512_mul_ps(LoadScales<true>(super), _mm512_cvtepi32_ps(sc));
      } else if constexpr (kBits == 2) {  // Q2_K: sc | mn << 4 in one byte
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp)));
        *s = _mm512_mul_ps(LoadScales<true>(super), _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))));
        *m = _mm512_xor_ps(_mm512_mul_ps(LoadScales<true>(super + 32), _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))),
                          _mm512_set1_ps(-0.0f));
      } else {
        *s = _mm512_mul_ps(LoadScales<true>(super), u8(sp));
        if constexpr (kLut && kBlock == 16) *s = _mm512_mul_ps(*s, _mm512_set1_ps(0.125f));  // IQ2_XS
        if constexpr (kMin) {
          *m = _mm512_xor_ps(_mm512_mul_ps(LoadScales<true>(super + 32), u8(sp + 16)), _mm512_set1_ps(-0.0f));
        }
      }
    } else {
      *s = LoadScales<kF16>(sp);
      if constexpr (kMin) *m = LoadScales<kF16>(sp + sbytes);
  }
  }
};

}  // namespace
}  // namespace infera
