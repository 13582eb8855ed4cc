#include "kernels/cpu/avx512vnni/vnni_kernels.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512vnni/block_decode512.h"
#include "kernels/qgemm_dispatch.h"

namespace infera::avx512vnni {
namespace {

// One 16-row group × kT tokens: lane r of each vector is row r. Per k-block
// the quants are loaded (and for 4-bit split into nibbles) once and used by
// every token; vpdpbusd against 4 broadcast activation bytes accumulates the
// exact integer dot of the block for all 16 rows at once.
template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut, int kT>
void QGemmT(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  using Decode = BlockDecode512<kBits, kBlock, kMin, kF16, kFac, kLut>;
  constexpr int kVecs = Decode::kVecs;
  constexpr int kLoads = Decode::kLoads;
  using Geometry = typename Decode::Geometry;
  const int64_t nb = w.n_blocks();
  const Decode decode(w.format().lut_u);
  __m512 acc[kT], macc[kT];
  const int8_t* q[kT];
  const int32_t* bias[kT];
  const float* da[kT];
  const float* dsum[kT];
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm512_setzero_ps();
    macc[t] = _mm512_setzero_ps();
    q[t] = a.Q(t0 + t);
    bias[t] = a.Bias(t0 + t);
    da[t] = a.Da(t0 + t);
    dsum[t] = a.Dsum(t0 + t);
  }
  auto block = [&](const uint8_t* blk, const uint8_t* sp, [[maybe_unused]] const uint8_t* super, int64_t b)
                   __attribute__((always_inline)) {
    __m512i wv[kVecs];
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);  // decode
    decode.Quants(blk, wv);
    __m512 s, m;
    decode.Scales(sp, super, &s, &m);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const int8_t* qt = q[t] + b * kBlock;
      __m512i isum = _mm512_set1_epi32(bias[t][b]);
#pragma GCC unroll 8
      for (int c = 0; c < kVecs; ++c) {
        const int e = kBits == 8 || kBits <= 3 ? 4 * c : (c < kLoads ? 4 * c : kBlock / 2 + 4 * (c - kLoads));
        int32_t a4;
        std::memcpy(&a4, qt + e, 4);
        isum = _mm512_dpbusd_epi32(isum, wv[c], _mm512_set1_epi32(a4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(s, _mm512_set1_ps(da[t][b])), acc[t]);
      if constexpr (kMin) macc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(dsum[t][b]), macc[t]);
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), nb, block);
  for (int t = 0; t < kT; ++t) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(acc[t], macc[t]));
}

template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut>
void QGemmFormat(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  switch (nt) {
    case 4: return QGemmT<kBits, kBlock, kMin, kF16, kFac, kLut, 4>(w, group, a, t0, y);
    case 3: return QGemmT<kBits, kBlock, kMin, kF16, kFac, kLut, 3>(w, group, a, t0, y);
    case 2: return QGemmT<kBits, kBlock, kMin, kF16, kFac, kLut, 2>(w, group, a, t0, y);
    default: return QGemmT<kBits, kBlock, kMin, kF16, kFac, kLut, 1>(w, group, a, t0, y);
  }
}

// vpshufb controls that spread a row's two kept bytes of one half of a
// window over its four positions (0x80: zero), per pair code: dword lane c
// for code c. Half 1 reads the row's bytes 2 and 3.
constexpr uint32_t PairControl(int code, int half) {
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

// The 2:4 sparse layout (PackFormat::sparse24): per window of 8 elements,
// the 64 bytes of kept values are spread in registers into the two dense
// vectors Q8_0's layout would hold (vpermd of the per-row pair codes into
// vpshufb controls; signed q ^ 0x80 = u, zeros become u = 128), then the
// dense kernel's exact arithmetic: the same vpdpbusd sums, so the results
// equal the dense Q8_0 kernel's bit for bit, from about two thirds of the
// bytes (5.5 bits per weight instead of 8.5). With 4-bit values (kBits 4,
// Q4_0) each window's values are first taken from their nibbles (u ^ 8;
// zeros become u = 8): the dense Q4_0 kernel's vectors and sums, from 3.5
// bits per weight instead of 4.5.
// The 8 dense Q8_0 (Q4_0) vectors of one 2:4 k-block (see QGemmSparse24T).
template <int kBits>
struct Spread24 {
  static constexpr int kCodes = 32 * kBits;  // the codes' offset in a block
  __m512i table0, table1, offs, sign;
  Spread24()
      // vpermd reads index bits [3:0]: entries 8..15 repeat 0..7, so bit 3
      // (c1's lowest bit, or a zero) needs no masking.
      : table0(_mm512_setr_epi32(PairControl(0, 0), PairControl(1, 0), PairControl(2, 0), PairControl(3, 0),
                                 PairControl(4, 0), PairControl(5, 0), 0x80808080, 0x80808080, PairControl(0, 0),
                                 PairControl(1, 0), PairControl(2, 0), PairControl(3, 0), PairControl(4, 0),
                                 PairControl(5, 0), 0x80808080, 0x80808080)),
        table1(_mm512_setr_epi32(PairControl(0, 1), PairControl(1, 1), PairControl(2, 1), PairControl(3, 1),
                                 PairControl(4, 1), PairControl(5, 1), 0x80808080, 0x80808080, PairControl(0, 1),
                                 PairControl(1, 1), PairControl(2, 1), PairControl(3, 1), PairControl(4, 1),
                                 PairControl(5, 1), 0x80808080, 0x80808080)),
        // Row r's bytes sit at 4 (r % 4) of its 128-bit lane (vpshufb's reach).
        offs(_mm512_set_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0, 0x0C0C0C0C, 0x08080808, 0x04040404, 0,
                              0x0C0C0C0C, 0x08080808, 0x04040404, 0, 0x0C0C0C0C, 0x08080808, 0x04040404, 0)),
        sign(_mm512_set1_epi8(static_cast<char>(kBits == 8 ? 0x80 : 0x08))) {}
  inline __attribute__((always_inline)) void Block(const uint8_t* blk, __m512i* wv) const {
    [[maybe_unused]] __m512i nib[4];
    if constexpr (kBits == 4) {
      const __m512i lo = _mm512_set1_epi8(0x0F);
      const __m512i c0 = _mm512_load_si512(blk), c1 = _mm512_load_si512(blk + 64);
      nib[0] = _mm512_and_si512(c0, lo);
      nib[1] = _mm512_and_si512(c1, lo);
      nib[2] = _mm512_and_si512(_mm512_srli_epi16(c0, 4), lo);
      nib[3] = _mm512_and_si512(_mm512_srli_epi16(c1, 4), lo);
    }
    // Row r's codes of the four windows are the bytes of dword r: one load,
    // and per window a shift (no byte-to-dword shuffle).
    const __m512i codes = _mm512_load_si512(blk + kCodes);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i vals = kBits == 8 ? _mm512_load_si512(blk + 64 * v) : nib[v];
      const __m512i cv = v == 0 ? codes : _mm512_srli_epi32(codes, 8 * v);
      const __m512i c0 = _mm512_add_epi8(_mm512_permutexvar_epi32(cv, table0), offs);
      const __m512i c1 = _mm512_add_epi8(_mm512_permutexvar_epi32(_mm512_srli_epi32(cv, 3), table1), offs);
      wv[2 * v] = _mm512_xor_si512(_mm512_shuffle_epi8(vals, c0), sign);
      wv[2 * v + 1] = _mm512_xor_si512(_mm512_shuffle_epi8(vals, c1), sign);
    }
  }
};

// The packed geometry of 2:4 with kBits-bit values (sized as 5- or 3-bit).
template <int kBits>
using Sparse24Geometry = PackedGeometry<kBits == 8 ? 5 : 3, 32, false, true, false>;

template <int kBits>
void ExpandSparse24T(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  const Spread24<kBits> spread;
  Sparse24Geometry<kBits>::ForEachBlock(w.Block(group, 0), w.n_blocks(), [&](const uint8_t* blk, const uint8_t* sp,
                                                                            const uint8_t*, int64_t b)
                                                                            __attribute__((always_inline)) {
    __m512i wv[8];
    spread.Block(blk, wv);
    uint8_t* out = dense->MutableBlock(b);
    if constexpr (kBits == 8) {
      for (int c = 0; c < 8; ++c) _mm512_store_si512(out + 64 * c, wv[c]);
    } else {  // Q4_0: vector c (elements 4c..) in the low nibbles, c + 4 (16 + 4c..) in the high ones
      for (int c = 0; c < 4; ++c) _mm512_store_si512(out + 64 * c, _mm512_or_si512(wv[c], _mm512_slli_epi16(wv[c + 4], 4)));
    }
    std::memcpy(dense->MutableScales(b), sp, 32);
  });
}

void ExpandSparse24(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  if (Sparse24ValueBits(w.format()) == 4) return ExpandSparse24T<4>(w, group, dense);
  ExpandSparse24T<8>(w, group, dense);
}

template <int kBits, int kT>
void QGemmSparse24T(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  using Geometry = Sparse24Geometry<kBits>;
  const int64_t nb = w.n_blocks();
  const Spread24<kBits> spread;
  __m512 acc[kT];
  const int8_t* q[kT];
  const int32_t* bias[kT];
  const float* da[kT];
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm512_setzero_ps();
    q[t] = a.Q(t0 + t);
    bias[t] = a.Bias(t0 + t);
    da[t] = a.Da(t0 + t);
  }
  auto block = [&](const uint8_t* blk, const uint8_t* sp, const uint8_t*, int64_t b) __attribute__((always_inline)) {
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);
    __m512i wv[8];
    spread.Block(blk, wv);
    const __m512 s = LoadScales<true>(sp);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const int8_t* qt = q[t] + b * 32;
      __m512i isum = _mm512_set1_epi32(bias[t][b]);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        int32_t a4;
        std::memcpy(&a4, qt + 4 * c, 4);
        isum = _mm512_dpbusd_epi32(isum, wv[c], _mm512_set1_epi32(a4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(s, _mm512_set1_ps(da[t][b])), acc[t]);
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), nb, block);
  // (Q8_0 has no mins: the dense kernel adds a zero macc.)
  for (int t = 0; t < kT; ++t) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(acc[t], _mm512_setzero_ps()));
}

template <int kBits>
void QGemmSparse24Bits(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  switch (nt) {
    case 4: return QGemmSparse24T<kBits, 4>(w, group, a, t0, y);
    case 3: return QGemmSparse24T<kBits, 3>(w, group, a, t0, y);
    case 2: return QGemmSparse24T<kBits, 2>(w, group, a, t0, y);
    default: return QGemmSparse24T<kBits, 1>(w, group, a, t0, y);
  }
}

void QGemmSparse24(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  if (Sparse24ValueBits(w.format()) == 4) return QGemmSparse24Bits<4>(w, group, a, t0, nt, y);
  QGemmSparse24Bits<8>(w, group, a, t0, nt, y);
}

// Row-scaled weights (W8A8): Q8_0's packed quants, one scale per row and per
// token, so a k-block is only its 8 vpdpbusd per token, accumulated in int32
// over the whole row (two chains per token, for the adder latency), and the
// scales are applied once at the end: float(isum) * (s * da), the
// reference's arithmetic.
template <int kT>
void QGemmRowT(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  using Geometry = PackedGeometry<8, 32, false, true, false>;
  __m512i even[kT], odd[kT];
  const int8_t* q[kT];
  for (int t = 0; t < kT; ++t) {
    even[t] = _mm512_set1_epi32(a.Bias(t0 + t)[0]);
    odd[t] = _mm512_setzero_si512();
    q[t] = a.Q(t0 + t);
  }
  auto block = [&](const uint8_t* blk, const uint8_t*, const uint8_t*, int64_t b) __attribute__((always_inline)) {
    if constexpr (kT == 1) Geometry::PrefetchAhead(blk, b);
    __m512i wv[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) wv[c] = _mm512_load_si512(blk + 64 * c);
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const int8_t* qt = q[t] + b * 32;
      // Two chains of 4 per block, started afresh and added to the row's
      // sums: the core overlaps consecutive blocks' chains.
      __m512i pe = _mm512_setzero_si512(), po = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 8; c += 2) {
        int32_t a0, a1;
        std::memcpy(&a0, qt + 4 * c, 4);
        std::memcpy(&a1, qt + 4 * c + 4, 4);
        pe = _mm512_dpbusd_epi32(pe, wv[c], _mm512_set1_epi32(a0));
        po = _mm512_dpbusd_epi32(po, wv[c + 1], _mm512_set1_epi32(a1));
      }
      even[t] = _mm512_add_epi32(even[t], pe);
      odd[t] = _mm512_add_epi32(odd[t], po);
    }
  };
  Geometry::ForEachBlock(w.Block(group, 0), w.n_blocks(), block);
  const __m512 s = LoadScales<true>(w.Scales(group, 0));
  for (int t = 0; t < kT; ++t) {
    const __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(a.Da(t0 + t)[0]));
    _mm512_storeu_ps(y + 16 * t, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even[t], odd[t])), sd));
  }
}

void QGemmRow(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  switch (nt) {
    case 8: return QGemmRowT<8>(w, group, a, t0, y);
    case 7: return QGemmRowT<7>(w, group, a, t0, y);
    case 6: return QGemmRowT<6>(w, group, a, t0, y);
    case 5: return QGemmRowT<5>(w, group, a, t0, y);
    case 4: return QGemmRowT<4>(w, group, a, t0, y);
    case 3: return QGemmRowT<3>(w, group, a, t0, y);
    case 2: return QGemmRowT<2>(w, group, a, t0, y);
    default: return QGemmRowT<1>(w, group, a, t0, y);
  }
}

struct QGemmKernel {
  template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut = false>
  static void Run(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
    QGemmFormat<kBits, kBlock, kMin, kF16, kFac, kLut>(w, group, a, t0, nt, y);
  }
};

}  // namespace

void Fill(KernelTable* t) {
  t->qgemm = DispatchPackFormat<QGemmKernel>;
  t->qgemm_variant = "avx512vnni";
  t->qgemm_sparse24 = QGemmSparse24;
  t->qgemm_sparse24_variant = "avx512vnni";
  t->expand_sparse24 = ExpandSparse24;
  t->qgemm_row = QGemmRow;
  t->qgemm_row_variant = "avx512vnni";
  FillFlash(t);
}

}  // namespace infera::avx512vnni
