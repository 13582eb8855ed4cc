#include "kernels/cpu/avx512vnni/vnni_kernels.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/qgemm_dispatch.h"

namespace infera::avx512vnni {
namespace {

// One 16-row group × kT tokens: lane r of each vector is row r. Per k-block
// the quants are loaded (and for 4-bit split into nibbles) once and used by
// every token; vpdpbusd against 4 broadcast activation bytes accumulates the
// exact integer dot of the block for all 16 rows at once.
template <int kBits, int kBlock, bool kMin, int kT>
void QGemmT(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  constexpr int kVecs = kBlock / 4;  // 4-element groups per block
  constexpr int kLoads = kBits == 8 ? kVecs : kVecs / 2;
  const size_t qbytes = w.quant_bytes();
  const size_t stride = w.block_bytes();
  const int64_t nb = w.n_blocks();
  const __m512i lo = _mm512_set1_epi8(0x0F);
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
  const uint8_t* blk = w.Block(group, 0);
  for (int64_t b = 0; b < nb; ++b, blk += stride) {
    __m512i wv[kVecs];
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
    const __m512 s = _mm512_load_ps(blk + qbytes);
    __m512 m = _mm512_setzero_ps();
    if constexpr (kMin) m = _mm512_load_ps(blk + qbytes + 64);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const int8_t* qt = q[t] + b * kBlock;
      __m512i isum = _mm512_set1_epi32(bias[t][b]);
#pragma GCC unroll 8
      for (int c = 0; c < kVecs; ++c) {
        const int e = kBits == 8 ? 4 * c : (c < kLoads ? 4 * c : kBlock / 2 + 4 * (c - kLoads));
        int32_t a4;
        std::memcpy(&a4, qt + e, 4);
        isum = _mm512_dpbusd_epi32(isum, wv[c], _mm512_set1_epi32(a4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(s, _mm512_set1_ps(da[t][b])), acc[t]);
      if constexpr (kMin) macc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(dsum[t][b]), macc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(acc[t], macc[t]));
}

template <int kBits, int kBlock, bool kMin>
void QGemmFormat(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  switch (nt) {
    case 4: return QGemmT<kBits, kBlock, kMin, 4>(w, group, a, t0, y);
    case 3: return QGemmT<kBits, kBlock, kMin, 3>(w, group, a, t0, y);
    case 2: return QGemmT<kBits, kBlock, kMin, 2>(w, group, a, t0, y);
    default: return QGemmT<kBits, kBlock, kMin, 1>(w, group, a, t0, y);
  }
}

struct QGemmKernel {
  template <int kBits, int kBlock, bool kMin>
  static void Run(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
    QGemmFormat<kBits, kBlock, kMin>(w, group, a, t0, nt, y);
  }
};

}  // namespace

void Fill(KernelTable* t) {
  t->qgemm = DispatchPackFormat<QGemmKernel>;
  t->qgemm_variant = "avx512vnni";
}

}  // namespace infera::avx512vnni
