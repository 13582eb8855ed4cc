#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/reference/reference_kernels.h"

namespace infera {

DotRowsFn KernelTable::DotRowsFor(DType t) const {
  switch (t) {
    case DType::kF32: return dot_rows_f32;
    case DType::kF16: return dot_rows_f16;
    case DType::kBF16: return dot_rows_bf16;
    default: {
      const auto i = static_cast<size_t>(t);
      return i < dot_rows_quant.size() ? dot_rows_quant[i] : nullptr;
    }
  }
}

KernelTable MakeKernelTable(CpuIsa isa) {
  const CpuIsa best = DetectCpuFeatures().BestIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  KernelTable t;
  reference::Fill(&t);
  if (isa >= CpuIsa::kAvx2) avx2::Fill(&t);
  if (isa >= CpuIsa::kAvx512) avx512::Fill(&t);
  return t;
}

KernelTable MakeBestKernelTable() { return MakeKernelTable(DetectCpuFeatures().BestIsa()); }

void Matmul(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
            float* y) {
  DotRowsFn dot = k.DotRowsFor(w.type);
  CHECK(dot != nullptr);
  constexpr int64_t kRowBlock = 16;
  // Row chunks are multiples of 16 rows so threads never share a cache line
  // of a single output row segment.
  pool.ParallelFor(w.n_out, kRowBlock, [&](int64_t r0, int64_t r1) {
    float tmp[kRowBlock];
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t nr = std::min(kRowBlock, r1 - rb);
      const uint8_t* wr = w.data + rb * w.row_bytes;
      for (int64_t t = 0; t < m; ++t) {
        dot(wr, w.row_bytes, nr, x + t * w.n_in, w.n_in, tmp);
        std::copy(tmp, tmp + nr, y + t * w.n_out + rb);
      }
    }
  });
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * scale);
}

void SiluMul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace infera
