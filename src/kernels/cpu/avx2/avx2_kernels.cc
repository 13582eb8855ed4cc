#include "kernels/cpu/avx2/avx2_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/attend_generic.h"
#include "kernels/cpu/avx2/exp256.h"
#include "kernels/cpu/avx2/qgemm256.h"
#include "kernels/flash_bf16_generic.h"
#include "kernels/flash_generic.h"
#include "kernels/qgemm_dispatch.h"

namespace infera::avx2 {
namespace {

// 16 reference lanes = two 8-lane halves.
struct V16 {
  __m256 lo, hi;
};

// Reduce16's order in registers: lanes i + i+8, then + i+4, then (0+2)+(1+3).
inline float Sum(const V16& v) {
  const __m256 h = _mm256_add_ps(v.lo, v.hi);
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

inline __m256 LoadF32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline __m256 LoadF16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 LoadBf16(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 2 rows × kT (<= 2) tokens. Decode (a non-null `next`: the bytes of the
// rows read after these) fetches those rows 128 bytes per step, at least as
// fast as these are read, so the next tile does not start cold.
template <int kT, int kEsz, __m256 (*Load)(const uint8_t*)>
void Tile(const uint8_t* r0, const uint8_t* r1, const float* x, int64_t ldx, int64_t n, float out[2][2],
          const uint8_t* next = nullptr) {
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
    if (next != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(next + 2 * i * kEsz), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + 2 * i * kEsz + 64), _MM_HINT_T0);
    }
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

// R rows × T tokens for prefill, the reference's 16 lanes in two passes:
// the chains of lanes 0-7 over the whole of k, then those of lanes 8-15.
// Each lane's chain is its own (fmas in increasing k, from 0), so the order
// of the two passes changes no bit; a pass holds only R·T 8-lane
// accumulators, and 4 × 3 fits AVX2's 16 registers (12 accumulators, 3
// token vectors, one weight vector): 12 multiply-adds per 7 loads, against 8
// per 8 for the 2 × 2 tile that holds both halves (Zen 3, one thread, F16
// 960 × 2560 × 64 tokens: 1.9× that tile). A tail shorter than 16 is read
// from zero-padded copies, as Tile does.
template <int R, int T, int kEsz, __m256 (*Load)(const uint8_t*)>
void TileTwoPass(const uint8_t* w, size_t row_bytes, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) {
  const int64_t n16 = n / 16 * 16, rem = n - n16;
  alignas(32) uint8_t wt[R][64] = {};
  alignas(32) float xt[T][16] = {};
  if (rem > 0) {
    for (int r = 0; r < R; ++r) std::memcpy(wt[r], w + r * row_bytes + n16 * kEsz, rem * kEsz);
    for (int t = 0; t < T; ++t) std::memcpy(xt[t], x + t * ldx + n16, rem * 4);
  }
  __m256 half[2][R][T];
  for (int h = 0; h < 2; ++h) {
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    auto step = [&](const uint8_t* wp, size_t wstride, const float* xp, int64_t xstride)
        __attribute__((always_inline)) {
      __m256 xv[T];
      for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(xp + t * xstride);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = Load(wp + r * wstride);
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    };
    for (int64_t i = 8 * h; i < n16; i += 16) step(w + i * kEsz, row_bytes, x + i, ldx);
    if (rem > 0) step(wt[0] + 8 * h * kEsz, 64, xt[0] + 8 * h, 16);
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) half[h][r][t] = acc[r][t];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) y[t * ldy + r] = Sum(V16{half[0][r][t], half[1][r][t]});
  }
}

template <int R, int kEsz, __m256 (*Load)(const uint8_t*)>
void TileTwoPassRows(const uint8_t* w, size_t row_bytes, const float* x, int64_t ldx, int nt, int64_t n, float* y,
                     int64_t ldy) {
  for (int t = 0; t < nt; t += 3) {
    switch (std::min(3, nt - t)) {
      case 3:
        TileTwoPass<R, 3, kEsz, Load>(w, row_bytes, x + t * ldx, ldx, n, y + t * ldy, ldy);
        break;
      case 2:
        TileTwoPass<R, 2, kEsz, Load>(w, row_bytes, x + t * ldx, ldx, n, y + t * ldy, ldy);
        break;
      default:
        TileTwoPass<R, 1, kEsz, Load>(w, row_bytes, x + t * ldx, ldx, n, y + t * ldy, ldy);
        break;
    }
  }
}

// One token (decode): 2-row tiles streaming the rows once, fetching the
// next ones ahead. More tokens: 4 × 3 two-pass tiles.
template <int kEsz, __m256 (*Load)(const uint8_t*)>
void FloatTile(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx, int nt, int64_t n, float* y,
               int64_t ldy) {
  if (nt == 1) {
    for (int r = 0; r < nr; r += 2) {
      const uint8_t* r0 = w + r * row_bytes;
      const uint8_t* r1 = r + 1 < nr ? r0 + row_bytes : r0;
      float out[2][2];
      Tile<1, kEsz, Load>(r0, r1, x, ldx, n, out, r0 + 2 * row_bytes);
      y[r] = out[0][0];
      if (r + 1 < nr) y[r + 1] = out[1][0];
    }
    return;
  }
  for (int r = 0; r < nr; r += 4) {
    const uint8_t* wr = w + r * row_bytes;
    switch (std::min(4, nr - r)) {
      case 4:
        TileTwoPassRows<4, kEsz, Load>(wr, row_bytes, x, ldx, nt, n, y + r, ldy);
        break;
      case 3:
        TileTwoPassRows<3, kEsz, Load>(wr, row_bytes, x, ldx, nt, n, y + r, ldy);
        break;
      case 2:
        TileTwoPassRows<2, kEsz, Load>(wr, row_bytes, x, ldx, nt, n, y + r, ldy);
        break;
      default:
        TileTwoPassRows<1, kEsz, Load>(wr, row_bytes, x, ldx, nt, n, y + r, ldy);
        break;
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

// QuantizeTokenReference with 8 lanes, bit-identical (see the AVX-512 one).
int32_t SumI32x8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void QuantizeToken(const float* x, int64_t n, int64_t block, int32_t mul, int8_t* q, int32_t* bias, float* da,
                   float* dsum) {
  if (block != 16 && block != 32) return QuantizeTokenReference(x, n, block, mul, q, bias, da, dsum);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b32 = 0; b32 < n / 32; ++b32) {
    const float* xb = x + 32 * b32;
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      mx = _mm256_max_ps(_mm256_andnot_ps(sign, v[j]), mx);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d >= kMinActScale ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i qi[4];
    for (int j = 0; j < 4; ++j) {
      qi[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // int32 -> int8 (values within [-127, 127]), in element order.
    const __m256i w01 = _mm256_packs_epi32(qi[0], qi[1]), w23 = _mm256_packs_epi32(qi[2], qi[3]);
    __m256i b = _mm256_packs_epi16(w01, w23);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b32), b);
    const int32_t s0 = SumI32x8(_mm256_add_epi32(qi[0], qi[1])), s1 = SumI32x8(_mm256_add_epi32(qi[2], qi[3]));
    if (block == 32) {
      bias[b32] = -(s0 + s1) * mul;
      da[b32] = d;
      dsum[b32] = d * static_cast<float>(s0 + s1);
    } else {
      bias[2 * b32] = -s0 * mul;
      bias[2 * b32 + 1] = -s1 * mul;
      da[2 * b32] = da[2 * b32 + 1] = d;
      dsum[2 * b32] = d * static_cast<float>(s0);
      dsum[2 * b32 + 1] = d * static_cast<float>(s1);
    }
  }
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAvx2;
  t->quantize_token = QuantizeToken;
  t->qgemm_variant = "avx2";
  t->tile_f32 = FloatTile<4, LoadF32>;
  t->tile_f16 = FloatTile<2, LoadF16>;
  t->tile_bf16 = FloatTile<2, LoadBf16>;
  t->qgemm = DispatchPackFormat<QGemm256Kernel<false>>;
  t->qgemm_row = QGemmRow256<false>;
  t->qgemm_row_variant = "avx2";
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
  t->attend_head = AttendHeadComposed<DotF32, AxpyF32>;
  FillFlash(t);
  t->silu_mul = SiluMul8;  // explicit vectors: GCC leaves the generic loops scalar here
  t->gelu_tanh_mul = GeluTanhMul8;
  t->soft_cap = SoftCapInPlace8;
  FillFlashBf16(t);
}

}  // namespace infera::avx2
