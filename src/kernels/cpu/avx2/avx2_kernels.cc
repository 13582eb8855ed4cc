#include "kernels/cpu/avx2/avx2_kernels.h"

#include <immintrin.h>

#include <cstring>

#include "tensor/fp16.h"

namespace infera::avx2 {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline __m256 LoadF32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline __m256 LoadF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 LoadBf16(const uint8_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float ScalarF32(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }
inline float ScalarF16(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return Fp16ToFp32(h); }
inline float ScalarBf16(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return Bf16ToFp32(h); }

// Four accumulators of 8 lanes; fixed order for a given n.
template <int kElemBytes, __m256 (*Load)(const uint8_t*), float (*Scalar)(const uint8_t*)>
float Dot(const uint8_t* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(Load(w + (i + 0) * kElemBytes), _mm256_loadu_ps(x + i + 0), a0);
    a1 = _mm256_fmadd_ps(Load(w + (i + 8) * kElemBytes), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(Load(w + (i + 16) * kElemBytes), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(Load(w + (i + 24) * kElemBytes), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load(w + i * kElemBytes), _mm256_loadu_ps(x + i), a0);
  float s = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += Scalar(w + i * kElemBytes) * x[i];
  return s;
}

template <int kElemBytes, __m256 (*Load)(const uint8_t*), float (*Scalar)(const uint8_t*)>
void DotRows(const uint8_t* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n_in, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) y[r] = Dot<kElemBytes, Load, Scalar>(w + r * row_bytes, x, n_in);
}

float DotF32(const float* a, const float* b, int64_t n) {
  return Dot<4, LoadF32, ScalarF32>(reinterpret_cast<const uint8_t*>(a), b, n);
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAvx2;
  t->dot_rows_f32 = DotRows<4, LoadF32, ScalarF32>;
  t->dot_rows_f16 = DotRows<2, LoadF16, ScalarF16>;
  t->dot_rows_bf16 = DotRows<2, LoadBf16, ScalarBf16>;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
}

}  // namespace infera::avx2
