#include "kernels/cpu/avx512vbmi2/sparse_mask_kernels.h"

#include <immintrin.h>

#include <cstring>

namespace infera::avx512vbmi2 {
namespace {

// One 16-row group x kT tokens of the sparse-mask layout: per k-block, each
// of Q8_0's 8 dense vectors is rebuilt from its mask and the next
// popcount(mask) stored bytes (vpexpandb; vpxor 0x80 gives u = q + 128 and 128
// where the weight is zero), then the dense Q8_0 kernel's exact arithmetic:
// bit-identical to it, reading 1 + 8 (1 - zeros) bits per weight (+ 0.5 for
// the scales) instead of 8.5.
template <int kT>
void QGemmMaskT(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, float* y) {
  const int64_t nb = w.n_blocks();
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* p = w.Group(group);
  for (int64_t b = 0; b < nb; ++b) {
    __builtin_prefetch(p + 2048, 0, 3);
    __builtin_prefetch(p + 2112, 0, 3);
    __builtin_prefetch(p + 2176, 0, 3);
    __builtin_prefetch(p + 2240, 0, 3);
    const uint8_t* vals = p + 96;
    __m512i wv[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      uint64_t mask;
      std::memcpy(&mask, p + 8 * c, 8);
      const __m512i v = _mm512_loadu_si512(vals);
      wv[c] = _mm512_xor_si512(_mm512_maskz_expand_epi8(mask, v), sign);
      vals += __builtin_popcountll(mask);
    }
    const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64)));
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const int8_t* qt = a.Q(t0 + t) + b * 32;
      __m512i isum = _mm512_set1_epi32(a.Bias(t0 + t)[b]);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        int32_t a4;
        std::memcpy(&a4, qt + 4 * c, 4);
        isum = _mm512_dpbusd_epi32(isum, wv[c], _mm512_set1_epi32(a4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(s, _mm512_set1_ps(a.Da(t0 + t)[b])), acc[t]);
    }
    p = vals;
  }
  for (int t = 0; t < kT; ++t) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(acc[t], _mm512_setzero_ps()));
}

void ExpandMask(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const uint8_t* p = w.Group(group);
  for (int64_t b = 0; b < w.n_blocks(); ++b) {
    const uint8_t* vals = p + 96;
    uint8_t* out = dense->MutableBlock(b);
    for (int c = 0; c < 8; ++c) {
      uint64_t mask;
      std::memcpy(&mask, p + 8 * c, 8);
      _mm512_store_si512(out + 64 * c, _mm512_xor_si512(_mm512_maskz_expand_epi8(mask, _mm512_loadu_si512(vals)), sign));
      vals += __builtin_popcountll(mask);
    }
    std::memcpy(dense->MutableScales(b), p + 64, 32);
    p = vals;
  }
}

void QGemmMask(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  switch (nt) {
    case 4: return QGemmMaskT<4>(w, group, a, t0, y);
    case 3: return QGemmMaskT<3>(w, group, a, t0, y);
    case 2: return QGemmMaskT<2>(w, group, a, t0, y);
    default: return QGemmMaskT<1>(w, group, a, t0, y);
  }
}

}  // namespace

void Fill(KernelTable* t) {
  t->qgemm_sparse_mask = QGemmMask;
  t->qgemm_sparse_mask_variant = "avx512vbmi2";
  t->expand_sparse_mask = ExpandMask;
}

}  // namespace infera::avx512vbmi2
