#include "kernels/reference/reference_kernels.h"

#include <cstring>

#include "tensor/fp16.h"

namespace infera::reference {
namespace {

// Eight interleaved partial sums, combined pairwise at the end: the same
// association for any call with the same n.
template <typename Load>
float DotGeneric(const uint8_t* w, const float* x, int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += load(w, i + k) * x[i + k];
  }
  float tail = 0;
  for (; i < n; ++i) tail += load(w, i) * x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

float LoadF32(const uint8_t* w, int64_t i) {
  float v;
  std::memcpy(&v, w + i * 4, 4);
  return v;
}
float LoadF16(const uint8_t* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, w + i * 2, 2);
  return Fp16ToFp32(h);
}
float LoadBf16(const uint8_t* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, w + i * 2, 2);
  return Bf16ToFp32(h);
}

template <float (*L)(const uint8_t*, int64_t)>
void DotRows(const uint8_t* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n_in, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) y[r] = DotGeneric(w + r * row_bytes, x, n_in, L);
}

float DotF32(const float* a, const float* b, int64_t n) {
  return DotGeneric(reinterpret_cast<const uint8_t*>(a), b, n, LoadF32);
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kScalar;
  t->dot_rows_f32 = DotRows<LoadF32>;
  t->dot_rows_f16 = DotRows<LoadF16>;
  t->dot_rows_bf16 = DotRows<LoadBf16>;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
}

}  // namespace infera::reference
