#include "kernels/cpu/avx2/avx2_kernels.h"

#include <immintrin.h>

#include <cstring>

namespace infera::avx2 {
namespace {

// 16 reference lanes = two 8-lane halves.
struct V16 {
  __m256 lo, hi;
};

inline float Sum(const V16& v) {
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, v.lo);
  _mm256_store_ps(lanes + 8, v.hi);
  return Reduce16(lanes);
}

inline __m256 LoadF32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline __m256 LoadF16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 LoadBf16(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 2 rows × kT (<= 2) tokens.
template <int kT, int kEsz, __m256 (*Load)(const uint8_t*)>
void Tile(const uint8_t* r0, const uint8_t* r1, const float* x, int64_t ldx, int64_t n, float out[2][2]) {
  const uint8_t* rows[2] = {r0, r1};
  V16 acc[2][kT];
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  }
  auto step = [&](const uint8_t* const* wr, const float* const* xr) {
    V16 wv[2];
    for (int r = 0; r < 2; ++r) wv[r] = {Load(wr[r]), Load(wr[r] + 8 * kEsz)};
    for (int t = 0; t < kT; ++t) {
      const __m256 xl = _mm256_loadu_ps(xr[t]), xh = _mm256_loadu_ps(xr[t] + 8);
      for (int r = 0; r < 2; ++r) {
        acc[r][t].lo = _mm256_fmadd_ps(wv[r].lo, xl, acc[r][t].lo);
        acc[r][t].hi = _mm256_fmadd_ps(wv[r].hi, xh, acc[r][t].hi);
      }
    }
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint8_t* wr[2] = {rows[0] + i * kEsz, rows[1] + i * kEsz};
    const float* xr[2] = {x + i, x + (kT > 1 ? ldx : 0) + i};
    step(wr, xr);
  }
  if (i < n) {
    // Zero-padded copies of the tail: 0 * 0 in the lanes past n.
    alignas(32) uint8_t wt[2][64] = {};
    alignas(32) float xt[2][16] = {};
    const int64_t rem = n - i;
    for (int r = 0; r < 2; ++r) std::memcpy(wt[r], rows[r] + i * kEsz, rem * kEsz);
    for (int t = 0; t < kT; ++t) std::memcpy(xt[t], x + t * ldx + i, rem * 4);
    const uint8_t* wr[2] = {wt[0], wt[1]};
    const float* xr[2] = {xt[0], xt[1]};
    step(wr, xr);
  }
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = Sum(acc[r][t]);
  }
}

template <int kEsz, __m256 (*Load)(const uint8_t*)>
void FloatTile(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx, int nt, int64_t n, float* y,
               int64_t ldy) {
  for (int r = 0; r < nr; r += 2) {
    const uint8_t* r0 = w + r * row_bytes;
    const uint8_t* r1 = r + 1 < nr ? r0 + row_bytes : r0;
    for (int t = 0; t < nt; t += 2) {
      float out[2][2];
      const int tn = nt - t >= 2 ? 2 : 1;
      if (tn == 2) Tile<2, kEsz, Load>(r0, r1, x + t * ldx, ldx, n, out);
      else Tile<1, kEsz, Load>(r0, r1, x + t * ldx, ldx, n, out);
      for (int rr = 0; rr < 2 && r + rr < nr; ++rr) {
        for (int tt = 0; tt < tn; ++tt) y[(t + tt) * ldy + r + rr] = out[rr][tt];
      }
    }
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  float out[2][2];
  const auto* w = reinterpret_cast<const uint8_t*>(a);
  Tile<1, 4, LoadF32>(w, w, b, 0, n, out);
  return out[0][0];
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = __builtin_fmaf(a, x[i], y[i]);
}

// Sums of 4 products u8 × s8 for the 8 lanes of 32 bytes, exactly (no
// saturation, unlike vpmaddubsw with u up to 255).
inline __m256i Sum4(const uint8_t* u, const int8_t* q) {
  const __m256i pa = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u))),
                                       _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  const __m256i pb =
      _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u + 16))),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16))));
  // hadd gives lanes 0 1 4 5 2 3 6 7.
  return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(pa, pb), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

void QDot(const uint8_t* u, const float* s16, const float* m16, bool has_min, const QuantActs& a, int64_t t0, int nt,
          float* y, int64_t ldy) {
  for (int i = 0; i < nt; ++i) {
    const int8_t* q = a.Q(t0 + i);
    const int32_t* bias4 = a.Bias4(t0 + i);
    const float* da16 = a.Da16(t0 + i);
    const float* ms16 = a.Ms16(t0 + i);
    V16 acc = {_mm256_setzero_ps(), _mm256_setzero_ps()}, macc = acc;
    for (int64_t k = 0; k < a.n_pad; k += kQUnit) {
      const int64_t g0 = k / 16;
      alignas(32) float c[16];
      _mm256_store_ps(c, _mm256_mul_ps(_mm256_loadu_ps(s16 + g0), _mm256_loadu_ps(da16 + g0)));
      _mm256_store_ps(c + 8, _mm256_mul_ps(_mm256_loadu_ps(s16 + g0 + 8), _mm256_loadu_ps(da16 + g0 + 8)));
      if (has_min) {
        macc.lo = _mm256_fmadd_ps(_mm256_loadu_ps(m16 + g0), _mm256_loadu_ps(ms16 + g0), macc.lo);
        macc.hi = _mm256_fmadd_ps(_mm256_loadu_ps(m16 + g0 + 8), _mm256_loadu_ps(ms16 + g0 + 8), macc.hi);
      }
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const int64_t e = k + 64 * j + 32 * h;
          const __m256i isum =
              _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias4 + e / 4)), Sum4(u + e, q + e));
          const int g = 4 * j + 2 * h;
          const __m256 cv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(&c[g])), _mm_broadcast_ss(&c[g + 1]), 1);
          __m256& dst = h == 0 ? acc.lo : acc.hi;
          dst = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), cv, dst);
        }
      }
    }
    y[i * ldy] = Sum(acc) + (has_min ? Sum(macc) : 0.0f);
  }
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAvx2;
  t->qdot_variant = "avx2";
  t->tile_f32 = FloatTile<4, LoadF32>;
  t->tile_f16 = FloatTile<2, LoadF16>;
  t->tile_bf16 = FloatTile<2, LoadBf16>;
  t->qdot = QDot;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
}

}  // namespace infera::avx2
