// The 256-bit packed quantized matmul (kernels/packed.h layout), shared by
// the AVX2 kernels and the AVX-VNNI ones: each includes it into its own
// translation unit, compiled with its own flags (internal linkage). The
// AVX-VNNI instantiation needs -mavxvnni.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/kernels.h"

namespace infera {
namespace {

// 16 reference lanes = two 8-lane halves.
struct V16x {
  __m256 lo, hi;
};

// 8 per-row scales (or mins) at p, as f32.
template <bool kF16>
inline __m256 LoadScales8(const uint8_t* p) {
  if constexpr (kF16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}

// 8-bit quants stored as u = q + 128, as signed q (one XOR).
inline __m256i SignedQ8(__m256i u) { return _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80))); }

// Per int32 lane, the sum of its 4 products q * a (mag = |q|; a broadcast
// activation bytes): vpmaddubsw(|q|, sign(a, q)) then vpmaddwd; |q| <= 128,
// |a| <= 127 keep the pairs below 2^15.
inline __m256i DotSignedQ8(__m256i mag, __m256i q, __m256i av, __m256i ones) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(av, q)), ones);
}

// Packed quantized matmul, one 16-row group (rows 0-7 in .lo, 8-15 in .hi)
// × kT (<= 2; 4 for plain 4-bit blocks) tokens. AVX2: vpmaddubsw on 4-bit
// values cannot saturate (15 * 127 * 2 < 2^15); 8-bit quants other than
// Q8_0's (kSigned8) are split into two nibbles. AVX-VNNI
// (kVnni): vpdpbusd on the bytes as they are, exact without splitting.
//
// kSigned8 (AVX2, 8-bit quants stored as q + 128): the bytes back to signed
// q (one XOR), then vpmaddubsw(|q|, sign(a, q)): one multiply per pair
// instead of two nibbles' (|q| <= 128, |a| <= 127: pairs below 2^15), with
// no offset, so the sums start at 0 instead of the bias: the same integers.
template <bool kVnni, int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut, int kT, bool kSigned8 = false>
void QGemm256T(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  constexpr int kChunks = kBits == 8 ? kBlock / 4 : kBits <= 3 ? 0 : kBlock / 8;
  constexpr int kHigh = kBits == 5 || kBits == 6 ? kBits - 4 : 0;  // bits in the high-bit chunk
  using Geometry = PackedGeometry<kBits, kBlock, kMin, kF16, kFac>;
  constexpr int kHalf = kF16 ? 16 : 32;  // bytes of 8 scales
  constexpr size_t sbytes = Geometry::kScaleBytes;
  const int64_t nb = w.n_blocks();
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  [[maybe_unused]] const __m256i table =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(w.format().lut_u)));
  const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
  V16x acc[kT], macc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = macc[t] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  auto block = [&](const uint8_t* blk, const uint8_t* sp, [[maybe_unused]] const uint8_t* super, int64_t b)
                   __attribute__((always_inline)) {
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);  // decode
    __m256i isum[kT][2];
    for (int t = 0; t < kT; ++t) isum[t][0] = isum[t][1] = _mm256_set1_epi32(kSigned8 ? 0 : a.Bias(t0 + t)[b]);
    if constexpr (kBits <= 3) {  // Q2_K, Q3_K: a 2-bit chunk per block of 16; vector v at bits [2v, 2v + 2)
      const __m256i three = _mm256_set1_epi8(3);
      [[maybe_unused]] const __m256i four = _mm256_set1_epi8(4);
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 32 * h));
        [[maybe_unused]] __m256i x;  // Q3_K: the high bits of rows 8h.. at bits 0-3
        if constexpr (kBits == 3) {
          x = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64));
          if (h == 1) x = _mm256_srli_epi16(x, 4);
        }
        for (int v = 0; v < 4; ++v) {
          __m256i u = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * v), three);
          if constexpr (kBits == 3) {  // u <= 7
            const __m256i hv = v < 2 ? _mm256_slli_epi16(x, 2 - v) : _mm256_srli_epi16(x, v - 2);
            u = _mm256_or_si256(u, _mm256_and_si256(hv, four));
          }
          for (int t = 0; t < kT; ++t) {
            int32_t a4;
            std::memcpy(&a4, a.Q(t0 + t) + b * kBlock + 4 * v, 4);
            if constexpr (kVnni) {
#if defined(__AVXVNNI__)
              isum[t][h] = _mm256_dpbusd_avx_epi32(isum[t][h], u, _mm256_set1_epi32(a4));
#endif
            } else {  // u <= 7: vpmaddubsw cannot saturate
              isum[t][h] = _mm256_add_epi32(isum[t][h],
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(a4)), ones));
            }
          }
        }
      }
    }
    for (int c = 0; c < kChunks; ++c) {
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h));
        if constexpr (kSigned8) {
          const __m256i q = SignedQ8(raw);
          const __m256i mag = _mm256_abs_epi8(q);
          for (int t = 0; t < kT; ++t) {
            int32_t a4;
            std::memcpy(&a4, a.Q(t0 + t) + b * kBlock + 4 * c, 4);
            isum[t][h] = _mm256_add_epi32(isum[t][h], DotSignedQ8(mag, q, _mm256_set1_epi32(a4), ones));
          }
          continue;
        }
        __m256i wl = _mm256_and_si256(raw, lo4);
        __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
        if constexpr (kHigh > 0) {  // u <= 63: vpmaddubsw pairs stay below 2^15
          const __m256i high = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + kBlock * 8 + 32 * h));
          const __m256i mask = _mm256_set1_epi8(static_cast<char>(((1 << kHigh) - 1) << 4));
          auto bits_of = [&](int v) {  // vector v's high bits, at [kHigh v, ...) of each byte, to bit 4
            const int at = kHigh * v;
            return _mm256_and_si256(at >= 4 ? _mm256_srli_epi16(high, at - 4) : _mm256_slli_epi16(high, 4 - at), mask);
          };
          wl = _mm256_or_si256(wl, bits_of(c));
          wh = _mm256_or_si256(wh, bits_of(kChunks + c));
        }
        if constexpr (kLut) {  // codes -> u (up to 241)
          wl = _mm256_shuffle_epi8(table, wl);
          wh = _mm256_shuffle_epi8(table, wh);
        }
        for (int t = 0; t < kT; ++t) {
          const int8_t* qt = a.Q(t0 + t) + b * kBlock;
          int32_t a_lo, a_hi;
          if constexpr (kVnni) {
#if defined(__AVXVNNI__)
            std::memcpy(&a_lo, qt + 4 * c, 4);
            if constexpr (kBits == 8) {
              isum[t][h] = _mm256_dpbusd_avx_epi32(isum[t][h], raw, _mm256_set1_epi32(a_lo));
            } else {
              std::memcpy(&a_hi, qt + kBlock / 2 + 4 * c, 4);
              isum[t][h] = _mm256_dpbusd_avx_epi32(isum[t][h], wl, _mm256_set1_epi32(a_lo));
              isum[t][h] = _mm256_dpbusd_avx_epi32(isum[t][h], wh, _mm256_set1_epi32(a_hi));
            }
#endif
          } else if constexpr (kBits == 8) {
            std::memcpy(&a_lo, qt + 4 * c, 4);
            const __m256i av = _mm256_set1_epi32(a_lo);
            const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wh, av), sixteen),
                                               _mm256_madd_epi16(_mm256_maddubs_epi16(wl, av), ones));
            isum[t][h] = _mm256_add_epi32(isum[t][h], p);
          } else if constexpr (kLut) {  // u up to 241: as two nibbles, as 8-bit quants
            std::memcpy(&a_lo, qt + 4 * c, 4);
            std::memcpy(&a_hi, qt + kBlock / 2 + 4 * c, 4);
            const __m256i al = _mm256_set1_epi32(a_lo), ah = _mm256_set1_epi32(a_hi);
            auto dot8 = [&](__m256i u, __m256i av) {
              return _mm256_add_epi32(
                  _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(u, 4), lo4), av), sixteen),
                  _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(u, lo4), av), ones));
            };
            isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_add_epi32(dot8(wl, al), dot8(wh, ah)));
          } else {
            std::memcpy(&a_lo, qt + 4 * c, 4);
            std::memcpy(&a_hi, qt + kBlock / 2 + 4 * c, 4);
            // The two products' pairs added in 16 bits first (u <= 63: each
            // at most 2 * 63 * 127, their sum below 2^15), one vpmaddwd.
            const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(wl, _mm256_set1_epi32(a_lo)),
                                                 _mm256_maddubs_epi16(wh, _mm256_set1_epi32(a_hi)));
            isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(p16, ones));
          }
        }
      }
    }
    __m256 s_lo, s_hi, m_lo = _mm256_setzero_ps(), m_hi = _mm256_setzero_ps();
    if constexpr (kFac) {  // s = d * sc, m = -(dmin * mn), as the unpacker computes them
      auto u8 = [](const uint8_t* p) {
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        // Sub-scales: unsigned with mins (Q4_K, Q5_K), signed without (Q6_K).
        return _mm256_cvtepi32_ps(kMin ? _mm256_cvtepu8_epi32(v) : _mm256_cvtepi8_epi32(v));
      };
      if constexpr (kBits == 3) {  // Q3_K: 6-bit sc, low nibbles at r % 8, high 2 bits at 8 + r / 4
        uint32_t hi4;
        std::memcpy(&hi4, sp + 8, 4);
        const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp)));
        const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(hi4));
        // sc - 32 of rows 8h .. 8h + 7: low nibbles from byte i (shifted by 4h), 2 high bits at 2 (8h + i).
        auto sub_scales = [&](int h) {
          const __m256i low = _mm256_and_si256(h ? _mm256_srli_epi32(lo, 4) : lo, _mm256_set1_epi32(15));
          const __m256i sh = _mm256_setr_epi32(16 * h, 16 * h + 2, 16 * h + 4, 16 * h + 6, 16 * h + 8, 16 * h + 10,
                                               16 * h + 12, 16 * h + 14);
          const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(hi, sh), _mm256_set1_epi32(3));
          return _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
        };
        const __m256i sc_lo = sub_scales(0), sc_hi = sub_scales(1);
        s_lo = _mm256_mul_ps(LoadScales8<true>(super), _mm256_cvtepi32_ps(sc_lo));
        s_hi = _mm256_mul_ps(LoadScales8<true>(super + 16), _mm256_cvtepi32_ps(sc_hi));
      } else if constexpr (kBits == 2) {  // Q2_K: sc | mn << 4 in one byte
        const __m256 neg = _mm256_set1_ps(-0.0f);
        const __m256i fifteen = _mm256_set1_epi32(15);
        const __m256i v_lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp)));
        const __m256i v_hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp + 8)));
        s_lo = _mm256_mul_ps(LoadScales8<true>(super), _mm256_cvtepi32_ps(_mm256_and_si256(v_lo, fifteen)));
        s_hi = _mm256_mul_ps(LoadScales8<true>(super + 16), _mm256_cvtepi32_ps(_mm256_and_si256(v_hi, fifteen)));
        m_lo = _mm256_xor_ps(_mm256_mul_ps(LoadScales8<true>(super + 32), _mm256_cvtepi32_ps(_mm256_srli_epi32(v_lo, 4))), neg);
        m_hi = _mm256_xor_ps(_mm256_mul_ps(LoadScales8<true>(super + 48), _mm256_cvtepi32_ps(_mm256_srli_epi32(v_hi, 4))), neg);
      } else {
        s_lo = _mm256_mul_ps(LoadScales8<true>(super), u8(sp));
        s_hi = _mm256_mul_ps(LoadScales8<true>(super + 16), u8(sp + 8));
        if constexpr (kLut && kBlock == 16) {  // IQ2_XS
          s_lo = _mm256_mul_ps(s_lo, _mm256_set1_ps(0.125f));
          s_hi = _mm256_mul_ps(s_hi, _mm256_set1_ps(0.125f));
        }
        if constexpr (kMin) {
          const __m256 neg = _mm256_set1_ps(-0.0f);
          m_lo = _mm256_xor_ps(_mm256_mul_ps(LoadScales8<true>(super + 32), u8(sp + 16)), neg);
          m_hi = _mm256_xor_ps(_mm256_mul_ps(LoadScales8<true>(super + 48), u8(sp + 24)), neg);
        }
      }
    } else {
      s_lo = LoadScales8<kF16>(sp);
      s_hi = LoadScales8<kF16>(sp + kHalf);
      if constexpr (kMin) {
        m_lo = LoadScales8<kF16>(sp + sbytes);
        m_hi = LoadScales8<kF16>(sp + sbytes + kHalf);
      }
    }
    for (int t = 0; t < kT; ++t) {
      const __m256 d = _mm256_set1_ps(a.Da(t0 + t)[b]);
      acc[t].lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][0]), _mm256_mul_ps(s_lo, d), acc[t].lo);
      acc[t].hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][1]), _mm256_mul_ps(s_hi, d), acc[t].hi);
      if constexpr (kMin) {
        const __m256 ds = _mm256_set1_ps(a.Dsum(t0 + t)[b]);
        macc[t].lo = _mm256_fmadd_ps(m_lo, ds, macc[t].lo);
        macc[t].hi = _mm256_fmadd_ps(m_hi, ds, macc[t].hi);
      }
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), nb, block);
  for (int t = 0; t < kT; ++t) {
    _mm256_storeu_ps(y + 16 * t, _mm256_add_ps(acc[t].lo, macc[t].lo));
    _mm256_storeu_ps(y + 16 * t + 8, _mm256_add_ps(acc[t].hi, macc[t].hi));
  }
}

// Row-scaled weights (W8A8), one 16-row group × kT (<= 2) tokens: the
// whole row's integer dot in int32 (AVX2: the bytes back to signed q and
// vpmaddubsw(|q|, sign(a, q)) as QGemm256T's kSigned8, the sums from 0
// instead of the bias; AVX-VNNI: vpdpbusd on u = q + 128 from the bias),
// then float(isum) * (s * da) as the reference.
template <bool kVnni, int kT>
void QGemmRow256T(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  using Geometry = PackedGeometry<8, 32, false, true, false>;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i isum[kT][2];
  const int8_t* q[kT];
  for (int t = 0; t < kT; ++t) {
    isum[t][0] = isum[t][1] = _mm256_set1_epi32(kVnni ? a.Bias(t0 + t)[0] : 0);
    q[t] = a.Q(t0 + t);
  }
  auto block = [&](const uint8_t* blk, const uint8_t*, const uint8_t*, int64_t b) __attribute__((always_inline)) {
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);
    // Each k-block's sums start afresh and join the row's total at its end:
    // vpdpbusd chains one block long, which the core overlaps across blocks
    // (one chain over the whole row ran at its latency, 0.7x Q8_0's speed).
    __m256i part[kT][2];
    for (int t = 0; t < kT; ++t) part[t][0] = part[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h));
        [[maybe_unused]] const __m256i qw = SignedQ8(raw);
        [[maybe_unused]] const __m256i mag = _mm256_abs_epi8(qw);
#pragma GCC unroll 2
        for (int t = 0; t < kT; ++t) {
          int32_t a4;
          std::memcpy(&a4, q[t] + b * 32 + 4 * c, 4);
          const __m256i av = _mm256_set1_epi32(a4);
          if constexpr (kVnni) {
#if defined(__AVXVNNI__)
            part[t][h] = _mm256_dpbusd_avx_epi32(part[t][h], raw, av);
#endif
          } else {
            part[t][h] = _mm256_add_epi32(part[t][h], DotSignedQ8(mag, qw, av, ones));
          }
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      isum[t][0] = _mm256_add_epi32(isum[t][0], part[t][0]);
      isum[t][1] = _mm256_add_epi32(isum[t][1], part[t][1]);
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), w.n_blocks(), block);
  const uint8_t* sp = w.Scales(group, 0);
  const __m256 s_lo = LoadScales8<true>(sp), s_hi = LoadScales8<true>(sp + 16);
  for (int t = 0; t < kT; ++t) {
    const __m256 d = _mm256_set1_ps(a.Da(t0 + t)[0]);
    _mm256_storeu_ps(y + 16 * t, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t][0]), _mm256_mul_ps(s_lo, d)));
    _mm256_storeu_ps(y + 16 * t + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t][1]), _mm256_mul_ps(s_hi, d)));
  }
}

template <bool kVnni>
void QGemmRow256(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  for (int t = 0; t < nt; t += 2) {
    if (nt - t >= 2) QGemmRow256T<kVnni, 2>(w, group, a, t0 + t, y + 16 * t);
    else QGemmRow256T<kVnni, 1>(w, group, a, t0 + t, y + 16 * t);
  }
}

template <bool kVnni>
struct QGemm256Kernel {
  template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut = false>
  static void Run(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
    if constexpr (!kVnni && kBits == 8 && !kMin) {
      if (w.format().shift == 7) {  // Q8_0: u = q + 128
        for (int t = 0; t < nt; t += 2) {
          if (nt - t >= 2)
            QGemm256T<false, 8, kBlock, false, kF16, kFac, kLut, 2, true>(w, group, a, t0 + t, y + 16 * t);
          else QGemm256T<false, 8, kBlock, false, kF16, kFac, kLut, 1, true>(w, group, a, t0 + t, y + 16 * t);
        }
        return;
      }
    }
    int t = 0;
    // Plain 4-bit blocks (Q4_0, Q4_1) take 4 tokens per call where the caller
    // gives 4: their nibbles split once for 4 tokens (Zen 3, Prefill64, one
    // thread: Q4_0 1.09x; Q4_K 0.91x and Q8_0 1.00x, so those keep 2).
    if constexpr (!kVnni && kBits == 4 && !kFac && !kLut) {
      for (; nt - t >= 4; t += 4)
        QGemm256T<false, 4, kBlock, kMin, kF16, false, false, 4>(w, group, a, t0 + t, y + 16 * t);
    }
    for (; t < nt; t += 2) {
      if (nt - t >= 2) QGemm256T<kVnni, kBits, kBlock, kMin, kF16, kFac, kLut, 2>(w, group, a, t0 + t, y + 16 * t);
      else QGemm256T<kVnni, kBits, kBlock, kMin, kF16, kFac, kLut, 1>(w, group, a, t0 + t, y + 16 * t);
    }
  }
};


}  // namespace
}  // namespace infera
