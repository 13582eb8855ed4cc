#include "kernels/cpu/avx512/avx512_kernels.h"

#include <immintrin.h>

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

// Tail: masked loads of the remaining (< 16) elements.
inline __m512 MaskLoadF32(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 MaskLoadF16(const uint8_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
inline __m512 MaskLoadBf16(const uint8_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

template <int kElemBytes, __m512 (*Load)(const uint8_t*), __m512 (*MaskLoad)(const uint8_t*, __mmask16)>
float Dot(const uint8_t* w, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(Load(w + (i + 0) * kElemBytes), _mm512_loadu_ps(x + i + 0), a0);
    a1 = _mm512_fmadd_ps(Load(w + (i + 16) * kElemBytes), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(Load(w + (i + 32) * kElemBytes), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(Load(w + (i + 48) * kElemBytes), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(Load(w + i * kElemBytes), _mm512_loadu_ps(x + i), a0);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    a1 = _mm512_fmadd_ps(MaskLoad(w + i * kElemBytes, m), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

template <int kElemBytes, __m512 (*Load)(const uint8_t*), __m512 (*MaskLoad)(const uint8_t*, __mmask16)>
void DotRows(const uint8_t* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n_in, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) y[r] = Dot<kElemBytes, Load, MaskLoad>(w + r * row_bytes, x, n_in);
}

float DotF32(const float* a, const float* b, int64_t n) {
  return Dot<4, LoadF32, MaskLoadF32>(reinterpret_cast<const uint8_t*>(a), b, n);
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAvx512;
  t->dot_rows_f32 = DotRows<4, LoadF32, MaskLoadF32>;
  t->dot_rows_f16 = DotRows<2, LoadF16, MaskLoadF16>;
  t->dot_rows_bf16 = DotRows<2, LoadBf16, MaskLoadBf16>;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
}

}  // namespace infera::avx512
