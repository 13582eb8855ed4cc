#include "kernels/cpu/avx512vnni/vnni_kernels.h"

#include <immintrin.h>

namespace infera::avx512vnni {
namespace {

inline float Sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return Reduce16(lanes);
}

// One unpacked row × kT tokens; the reference QDot's lanes exactly. The row's
// bytes are loaded once per chunk and used by every token.
template <int kT>
void QDotT(const uint8_t* u, const float* s16, const float* m16, bool has_min, const QuantActs& a, int64_t t0, float* y,
           int64_t ldy) {
  // Lane l of chunk j takes c[4j + l/4].
  const __m512i idx0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i four = _mm512_set1_epi32(4);
  const __m512i idx[4] = {idx0, _mm512_add_epi32(idx0, four), _mm512_add_epi32(idx0, _mm512_add_epi32(four, four)),
                          _mm512_add_epi32(idx0, _mm512_set1_epi32(12))};
  __m512 acc[kT], macc[kT];
  const int8_t* q[kT];
  const int32_t* bias4[kT];
  const float* da16[kT];
  const float* ms16[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm512_setzero_ps();
    macc[t] = _mm512_setzero_ps();
    q[t] = a.Q(t0 + t);
    bias4[t] = a.Bias4(t0 + t);
    da16[t] = a.Da16(t0 + t);
    ms16[t] = a.Ms16(t0 + t);
  }
  for (int64_t k = 0; k < a.n_pad; k += kQUnit) {
    const int64_t g0 = k / 16;
    const __m512 s = _mm512_loadu_ps(s16 + g0);
    __m512 c[kT];
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) c[t] = _mm512_mul_ps(s, _mm512_loadu_ps(da16[t] + g0));
    if (has_min) {
      const __m512 m = _mm512_loadu_ps(m16 + g0);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) macc[t] = _mm512_fmadd_ps(m, _mm512_loadu_ps(ms16[t] + g0), macc[t]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i w = _mm512_loadu_si512(u + k + 64 * j);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) {
        const __m512i isum = _mm512_dpbusd_epi32(_mm512_loadu_si512(bias4[t] + (k + 64 * j) / 4), w,
                                                 _mm512_loadu_si512(q[t] + k + 64 * j));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(idx[j], c[t]), acc[t]);
      }
    }
  }
  for (int t = 0; t < kT; ++t) y[t * ldy] = Sum(acc[t]) + (has_min ? Sum(macc[t]) : 0.0f);
}

void QDot(const uint8_t* u, const float* s16, const float* m16, bool has_min, const QuantActs& a, int64_t t0, int nt,
          float* y, int64_t ldy) {
  switch (nt) {
    case 4: return QDotT<4>(u, s16, m16, has_min, a, t0, y, ldy);
    case 3: return QDotT<3>(u, s16, m16, has_min, a, t0, y, ldy);
    case 2: return QDotT<2>(u, s16, m16, has_min, a, t0, y, ldy);
    default: return QDotT<1>(u, s16, m16, has_min, a, t0, y, ldy);
  }
}

}  // namespace

void Fill(KernelTable* t) {
  t->qdot = QDot;
  t->qdot_variant = "avx512vnni";
}

}  // namespace infera::avx512vnni
