// The 2:4 sparse layout (PackFormat::sparse24, 8- or 4-bit values) on
// 256-bit vectors, shared by the AVX2 kernels and the AVX-VNNI ones: each
// includes it into its own translation unit, compiled with its own flags
// (internal linkage; the AVX-VNNI instantiation needs -mavxvnni).
//
// A 16-row group is two halves of 8 rows (one ymm each). Per window of 8
// elements and half, the rows' kept values (row r at bytes 4 (r % 8) of the
// half) are spread by vpshufb with controls picked by vpermd from the
// per-row pair codes (6 codes + 2 unused: exactly vpermd's 8 entries), into
// the two vectors the dense layout holds for elements 0..3 and 4..7 of the
// window; xor with the zero's code gives u (q + 128 for Q8_0, q + 8 for
// Q4_0; elements not kept get exactly the zero's u). The integer sums are
// then those of the dense kernel in qgemm256.h (AVX2: 8-bit u split into
// nibbles for vpmaddubsw, 4-bit u as they are; AVX-VNNI: vpdpbusd), exact,
// and the float steps are the same: results equal the dense Q8_0 / Q4_0
// kernels' bit for bit.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/kernels.h"

namespace infera {
namespace {

// vpshufb control spreading a row's two kept bytes of one half of a window
// over its four positions (0x80: zero), for pair code `code`; half 1 reads
// the row's bytes 2 and 3.
constexpr uint32_t PairControl256(int code, int half) {
  uint32_t ctl = 0;
  for (int pos = 0; pos < 4; ++pos) {
    uint32_t b = 0x80;
    for (int slot = 0; slot < 2; ++slot) {
      if (kPairs24[code][slot] == pos) b = static_cast<uint32_t>(2 * half + slot);
    }
    ctl |= b << (8 * pos);
  }
  return ctl;
}

template <int kBits>
struct Spread24x256 {
  static constexpr int kCodes = 32 * kBits;  // the codes' offset in a block
  __m256i table0, table1, offs, zero, seven, lo4;
  Spread24x256()
      : table0(_mm256_setr_epi32(PairControl256(0, 0), PairControl256(1, 0), PairControl256(2, 0),
                                 PairControl256(3, 0), PairControl256(4, 0), PairControl256(5, 0), 0x80808080,
                                 0x80808080)),
        table1(_mm256_setr_epi32(PairControl256(0, 1), PairControl256(1, 1), PairControl256(2, 1),
                                 PairControl256(3, 1), PairControl256(4, 1), PairControl256(5, 1), 0x80808080,
                                 0x80808080)),
        // Row r's bytes sit at 4 (r % 4) of its 128-bit lane (vpshufb's reach).
        offs(_mm256_set_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0, 0x0C0C0C0C, 0x08080808, 0x04040404, 0)),
        zero(_mm256_set1_epi8(static_cast<char>(kBits == 8 ? 0x80 : 0x08))),
        seven(_mm256_set1_epi32(7)),
        lo4(_mm256_set1_epi8(0x0F)) {}
  // Half h (rows 8h .. 8h + 7) of k-block `blk` -> wv[8]: vector c holds
  // elements 4c .. 4c + 3 of each row (u, one byte each).
  inline __attribute__((always_inline)) void Half(const uint8_t* blk, int h, __m256i* wv) const {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      __m256i vals;
      if constexpr (kBits == 8) {
        vals = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64 * v + 32 * h));
      } else {  // window v: chunk v % 2, low nibbles for v < 2
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64 * (v % 2) + 32 * h));
        vals = _mm256_and_si256(v < 2 ? raw : _mm256_srli_epi16(raw, 4), lo4);
      }
      const __m256i codes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kCodes + 16 * v + 8 * h)));
      const __m256i c0 = _mm256_add_epi8(_mm256_permutevar8x32_epi32(table0, _mm256_and_si256(codes, seven)), offs);
      const __m256i c1 = _mm256_add_epi8(_mm256_permutevar8x32_epi32(table1, _mm256_srli_epi32(codes, 3)), offs);
      wv[2 * v] = _mm256_xor_si256(_mm256_shuffle_epi8(vals, c0), zero);
      wv[2 * v + 1] = _mm256_xor_si256(_mm256_shuffle_epi8(vals, c1), zero);
    }
  }
};

template <int kBits>
using Sparse24Geometry256 = PackedGeometry<kBits == 8 ? 5 : 3, 32, false, true, false>;

// isum += u · a4 (4 bytes of u per lane against the broadcast activations
// a4), exactly: vpdpbusd (AVX-VNNI), or vpmaddubsw + vpmaddwd, 8-bit u as
// two nibbles so that no pair sum saturates.
template <bool kVnni, int kBits>
inline __attribute__((always_inline)) __m256i Dot4(__m256i isum, __m256i u, __m256i a4) {
  if constexpr (kVnni) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(isum, u, a4);
#endif
  }
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kBits == 8) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), lo4), lo = _mm256_and_si256(u, lo4);
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, a4), _mm256_set1_epi16(16)),
                                       _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a4), ones));
    return _mm256_add_epi32(isum, p);
  }
  return _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a4), ones));
}

// One 16-row group × kT (<= 2) tokens of the 2:4 layout (see QGemmFn).
template <bool kVnni, int kBits, int kT>
void QGemmSparse24x256T(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  using Geometry = Sparse24Geometry256<kBits>;
  const Spread24x256<kBits> spread;
  __m256 acc[kT][2];
  for (int t = 0; t < kT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  auto block = [&](const uint8_t* blk, const uint8_t* sp, const uint8_t*, int64_t b) __attribute__((always_inline)) {
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i wv[8];
      spread.Half(blk, h, wv);
      const __m256 s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + 16 * h)));
#pragma GCC unroll 2
      for (int t = 0; t < kT; ++t) {
        const int8_t* qt = a.Q(t0 + t) + b * 32;
        __m256i isum = _mm256_set1_epi32(a.Bias(t0 + t)[b]);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          int32_t a4;
          std::memcpy(&a4, qt + 4 * c, 4);
          isum = Dot4<kVnni, kBits>(isum, wv[c], _mm256_set1_epi32(a4));
        }
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(s, _mm256_set1_ps(a.Da(t0 + t)[b])),
                                    acc[t][h]);
      }
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), w.n_blocks(), block);
  // (No mins: the dense kernels add a zero macc.)
  for (int t = 0; t < kT; ++t) {
    _mm256_storeu_ps(y + 16 * t, _mm256_add_ps(acc[t][0], _mm256_setzero_ps()));
    _mm256_storeu_ps(y + 16 * t + 8, _mm256_add_ps(acc[t][1], _mm256_setzero_ps()));
  }
}

template <bool kVnni, int kBits>
void QGemmSparse24x256Bits(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  for (int t = 0; t < nt; t += 2) {
    if (nt - t >= 2) QGemmSparse24x256T<kVnni, kBits, 2>(w, group, a, t0 + t, y + 16 * t);
    else QGemmSparse24x256T<kVnni, kBits, 1>(w, group, a, t0 + t, y + 16 * t);
  }
}

template <bool kVnni>
void QGemmSparse24x256(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  if (Sparse24ValueBits(w.format()) == 4) return QGemmSparse24x256Bits<kVnni, 4>(w, group, a, t0, nt, y);
  QGemmSparse24x256Bits<kVnni, 8>(w, group, a, t0, nt, y);
}

// A 2:4 group -> the dense Q8_0 / Q4_0 group it stands for (ExpandSparseFn).
template <int kBits>
void ExpandSparse24x256Bits(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  const Spread24x256<kBits> spread;
  Sparse24Geometry256<kBits>::ForEachBlock(
      w.Block(group, 0), w.n_blocks(),
      [&](const uint8_t* blk, const uint8_t* sp, const uint8_t*, int64_t b) __attribute__((always_inline)) {
        uint8_t* out = dense->MutableBlock(b);
        for (int h = 0; h < 2; ++h) {
          __m256i wv[8];
          spread.Half(blk, h, wv);
          for (int c = 0; c < (kBits == 8 ? 8 : 4); ++c) {
            // Q4_0: vector c (elements 4c ..) in the low nibbles, c + 4 in the high ones.
            const __m256i v = kBits == 8 ? wv[c] : _mm256_or_si256(wv[c], _mm256_slli_epi16(wv[c + 4], 4));
            _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * c + 32 * h), v);
          }
        }
        std::memcpy(dense->MutableScales(b), sp, 32);
      });
}

inline void ExpandSparse24x256(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  if (Sparse24ValueBits(w.format()) == 4) return ExpandSparse24x256Bits<4>(w, group, dense);
  ExpandSparse24x256Bits<8>(w, group, dense);
}

}  // namespace
}  // namespace infera
