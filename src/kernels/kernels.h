// One table of CPU kernels, filled once at start-up for the best ISA the CPU
// supports (or a lower one on request). The scalar reference fills every
// entry; each ISA level overrides only what it speeds up. Every override is
// tested against the reference (tests/unit/kernels_test.cc).
//
// Batch invariance: every output element is produced by one call of a
// per-row function whose reduction order depends only on n_in and the ISA, so
// results do not depend on how many tokens or threads share a call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace infera {

// y[r] = W[r, :] · x for r in [0, n_rows). W rows are `row_bytes` apart, each
// n_in elements of the table entry's weight type; x is f32 [n_in].
using DotRowsFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t n_rows, const float* x,
                           int64_t n_in, float* y);

struct KernelTable {
  CpuIsa isa = CpuIsa::kScalar;
  DotRowsFn dot_rows_f32 = nullptr;
  DotRowsFn dot_rows_f16 = nullptr;
  DotRowsFn dot_rows_bf16 = nullptr;
  // Quantized block types, indexed by DType value (null: unsupported).
  std::array<DotRowsFn, 64> dot_rows_quant{};
  // Plain f32 dot product (attention scores).
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // y += a * x (attention value accumulation).
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n) = nullptr;

  DotRowsFn DotRowsFor(DType t) const;
};

// Fills the table for `isa` (clamped to what `DetectCpuFeatures` reports).
KernelTable MakeKernelTable(CpuIsa isa);
KernelTable MakeBestKernelTable();

// A weight matrix W [n_out, n_in] of any supported type (rows contiguous).
struct WeightMatrix {
  DType type = DType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};

// y [m, n_out] = x [m, n_in] · W^T, split over output rows across the pool.
// Each thread walks blocks of W rows and reuses each block for all m tokens.
void Matmul(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
            float* y);

// Element-wise ops (single-threaded, called per row).
// y[i] = x[i] / rms(x) * w[i]; accumulates in double.
void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);
// g[i] = silu(g[i]) * u[i]
void SiluMul(float* g, const float* u, int64_t n);
// In-place softmax over x[0, n).
void Softmax(float* x, int64_t n);

}  // namespace infera
