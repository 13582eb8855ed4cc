#include "kernels/cpu/avx512/avx512_kernels.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/attend_generic.h"
#include "kernels/cpu/avx512/reduce512.h"


namespace infera::avx512 {
namespace {

inline __m512 LoadF32(const uint8_t* p) { return _mm512_loadu_ps(p); }
inline __m512 LoadF16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 LoadBf16(const uint8_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 MaskLoadF32(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 MaskLoadF16(const uint8_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
inline __m512 MaskLoadBf16(const uint8_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

constexpr int kPrefetchBytes = 512;

// 4 weight rows × kT tokens, one 16-lane accumulator each (the reference's
// lane structure). Rows past nr repeat row 0 and are not stored.
template <int kT, int kEsz, __m512 (*Load)(const uint8_t*), __m512 (*MaskLoad)(const uint8_t*, __mmask16)>
void Tile(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) {
  const uint8_t* rows[4];
  for (int r = 0; r < 4; ++r) rows[r] = w + (r < nr ? r : 0) * row_bytes;
  __m512 acc[4][kT];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // Decode streams each row once, and rows are short (a few KiB) next to
  // what the memory latency needs in flight: fetch ahead within each row,
  // and fetch the next tile's rows (the caller walks rows upward; they are
  // the bytes right after this tile's) 256 bytes per step, at least as fast
  // as this tile is read, so no tile starts cold. (Prefill re-reads rows
  // from cache.)
  const uint8_t* next = w + 4 * row_bytes;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wv[4];
    if constexpr (kT == 1) {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) _mm_prefetch(reinterpret_cast<const char*>(next + 4 * i * kEsz + 64 * c), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      if constexpr (kT == 1) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i * kEsz + kPrefetchBytes), _MM_HINT_T0);
      wv[r] = Load(rows[r] + i * kEsz);
    }
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 wv[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) wv[r] = MaskLoad(rows[r] + i * kEsz, m);
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  // Every loop over the accumulators is unrolled (constant bounds), else GCC
  // keeps a zeroed copy of them on the stack (12 % of prefill's tile time).
  float sums[4][kT];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) sums[r][t] = Sum(acc[r][t]);
  }
  if constexpr (kT == 1) {
    // One token: the rows' sums are contiguous in y, one masked store (GCC
    // made the loop below a call to memcpy per tile: 1-2 % of a small
    // model's decode).
    _mm_mask_storeu_ps(y, static_cast<__mmask8>((1u << nr) - 1),
                       _mm_setr_ps(sums[0][0], sums[1][0], sums[2][0], sums[3][0]));
  } else {
    for (int r = 0; r < nr; ++r) {
      for (int t = 0; t < kT; ++t) y[t * ldy + r] = sums[r][t];
    }
  }
}

template <int kEsz, __m512 (*Load)(const uint8_t*), __m512 (*MaskLoad)(const uint8_t*, __mmask16)>
void FloatTile(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx, int nt, int64_t n, float* y,
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

float DotF32(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return Sum(acc);
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// The composed attention with the head's query and output kept in registers
// (head_dim a multiple of 16, at most 256): the same operations in the same
// order as AttendHeadComposed, without a call per cached position.
void AttendHead(const float* q, const float* k_base, const float* v_base, int64_t row_stride, int head_dim, float scale,
                float softcap, const int32_t* slots, int32_t first, int32_t last, float* scores, float* out) {
  if (head_dim % 16 != 0 || head_dim > 256 || softcap > 0) {
    return AttendHeadComposed<DotF32, AxpyF32>(q, k_base, v_base, row_stride, head_dim, scale, softcap, slots, first,
                                                last, scores, out);
  }
  const int nv = head_dim / 16;
  const int32_t n = last - first + 1;
  __m512 qv[16];
  for (int c = 0; c < nv; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  for (int32_t i = 0; i < n; ++i) {
    const float* kr = k_base + static_cast<int64_t>(slots[first + i]) * row_stride;
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < nv; ++c) acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kr + 16 * c), acc);
    scores[i] = Sum(acc) * scale;
  }
  Softmax(scores, n);
  __m512 o[16];
  for (int c = 0; c < nv; ++c) o[c] = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; ++i) {
    const float* vr = v_base + static_cast<int64_t>(slots[first + i]) * row_stride;
    const __m512 p = _mm512_set1_ps(scores[i]);
    for (int c = 0; c < nv; ++c) o[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vr + 16 * c), o[c]);
  }
  for (int c = 0; c < nv; ++c) _mm512_storeu_ps(out + 16 * c, o[c]);
}

// QuantizeTokenReference with 16 lanes: max, scale and round (half to even,
// as the reference's magic-number rounding) are the same IEEE operations, the
// sums are exact integers, so the result is bit-identical.
void QuantizeToken(const float* x, int64_t n, int64_t block, int32_t mul, int8_t* q, int32_t* bias, float* da,
                   float* dsum) {
  if (block != 16 && block != 32) return QuantizeTokenReference(x, n, block, mul, q, bias, da, dsum);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b32 = 0; b32 < n / 32; ++b32) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b32), x1 = _mm512_loadu_ps(x + 32 * b32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    const float d = amax / 127.0f;
    const float id = d >= kMinActScale ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, vid), kNearest));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, vid), kNearest));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b32), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b32 + 16), _mm512_cvtepi32_epi8(q1));
    if (block == 32) {
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      bias[b32] = -sum * mul;
      da[b32] = d;
      dsum[b32] = d * static_cast<float>(sum);
    } else {
      const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
      bias[2 * b32] = -s0 * mul;
      bias[2 * b32 + 1] = -s1 * mul;
      da[2 * b32] = da[2 * b32 + 1] = d;
      dsum[2 * b32] = d * static_cast<float>(s0);
      dsum[2 * b32 + 1] = d * static_cast<float>(s1);
    }
  }
}

// QuantizeTokenRowReference with 16 lanes: the max is exact whatever the
// order, the rounding the same IEEE operations, the sum an exact integer.
void QuantizeTokenRow(const float* x, int64_t n, int8_t* q, int32_t* bias, float* da, float* dsum) {
  if (n % 16 != 0) return QuantizeTokenRowReference(x, n, q, bias, da, dsum);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 mx = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)));
  const float amax = _mm512_reduce_max_ps(mx);
  const float d = amax / 127.0f;
  const float id = d >= kMinActScale ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m512i sum = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512i qi = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid), kNearest));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(qi));
    sum = _mm512_add_epi32(sum, qi);
  }
  const int32_t s = _mm512_reduce_add_epi32(sum);
  *bias = -s * 128;
  *da = d;
  *dsum = d * static_cast<float>(s);
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAvx512;
  t->quantize_token = QuantizeToken;
  t->quantize_token_row = QuantizeTokenRow;
  t->tile_f32 = FloatTile<4, LoadF32, MaskLoadF32>;
  t->tile_f16 = FloatTile<2, LoadF16, MaskLoadF16>;
  t->tile_bf16 = FloatTile<2, LoadBf16, MaskLoadBf16>;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
  t->attend_head = AttendHead;
  FillFlash(t);
}

}  // namespace infera::avx512
