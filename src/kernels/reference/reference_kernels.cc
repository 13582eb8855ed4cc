#include "kernels/reference/reference_kernels.h"

#include <cstring>

#include <vector>

#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

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

// Quantized rows: dequantize into a per-thread buffer, then the f32 dot.
// The portable oracle for the integer kernels of each block type.
template <DType kType>
void DotRowsDequant(const uint8_t* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n_in, float* y) {
  thread_local std::vector<float> row;
  row.resize(n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    DequantizeRow(kType, w + r * row_bytes, row.data(), n_in);
    y[r] = DotGeneric(reinterpret_cast<const uint8_t*>(row.data()), x, n_in, LoadF32);
  }
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
  auto set = [&](DType d, DotRowsFn fn) { t->dot_rows_quant[static_cast<size_t>(d)] = fn; };
  set(DType::kQ4_0, DotRowsDequant<DType::kQ4_0>);
  set(DType::kQ4_1, DotRowsDequant<DType::kQ4_1>);
  set(DType::kQ5_0, DotRowsDequant<DType::kQ5_0>);
  set(DType::kQ5_1, DotRowsDequant<DType::kQ5_1>);
  set(DType::kQ8_0, DotRowsDequant<DType::kQ8_0>);
  set(DType::kIQ4_NL, DotRowsDequant<DType::kIQ4_NL>);
  set(DType::kQ2_K, DotRowsDequant<DType::kQ2_K>);
  set(DType::kQ3_K, DotRowsDequant<DType::kQ3_K>);
  set(DType::kQ4_K, DotRowsDequant<DType::kQ4_K>);
  set(DType::kQ5_K, DotRowsDequant<DType::kQ5_K>);
  set(DType::kQ6_K, DotRowsDequant<DType::kQ6_K>);
}

}  // namespace infera::reference
