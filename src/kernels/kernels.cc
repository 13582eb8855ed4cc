#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avxvnni/avxvnni_kernels.h"
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512vnni/vnni_kernels.h"
#include "kernels/reference/reference_kernels.h"

namespace infera {

FloatTileFn KernelTable::FloatTileFor(DType t) const {
  switch (t) {
    case DType::kF32: return tile_f32;
    case DType::kF16: return tile_f16;
    case DType::kBF16: return tile_bf16;
    default: return nullptr;
  }
}

KernelTable MakeKernelTable(CpuIsa isa) {
  const CpuFeatures f = DetectCpuFeatures();
  const CpuIsa best = f.BestIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  KernelTable t;
  reference::Fill(&t);
  if (isa >= CpuIsa::kAvx2) {
    avx2::Fill(&t);
    if (f.avx_vnni) avxvnni::Fill(&t);
  }
  if (isa >= CpuIsa::kAvx512) {
    avx512::Fill(&t);
    if (f.avx512vnni) avx512vnni::Fill(&t);
  }
  return t;
}

KernelTable MakeBestKernelTable() { return MakeKernelTable(DetectCpuFeatures().BestIsa()); }

namespace {

constexpr int64_t kRowAlign = 16;
constexpr int64_t kFloatTileTokens = 6;
constexpr int64_t kL2Budget = 384 * 1024;   // bytes of activations per token block (quantized)
constexpr int64_t kL2Weights = 512 * 1024;  // bytes of weight rows per block (float)

// Tokens per block: a multiple of 12 (whole 4- and 6-token tiles).
int64_t TokenBlock(int64_t bytes_per_token) {
  const int64_t tb = kL2Budget / std::max<int64_t>(bytes_per_token, 1);
  return std::clamp<int64_t>(tb / 12 * 12, 12, 252);
}

void MatmulFloat(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
                 float* y) {
  const FloatTileFn tile = k.FloatTileFor(w.type);
  CHECK(tile != nullptr);
  // Each thread walks its rows in L2-sized blocks and, in each, every 6-token
  // tile over all the block's 4-row tiles: a tile's activations stay in L1
  // (or L2 for long rows) while the block's weights (half the bytes for
  // F16) come from L2. Reading the activations from L2 for every weight tile
  // instead was 10-15 % slower prefill (m360 / m1b F16).
  const int64_t rb = std::max<int64_t>(kRowAlign, kL2Weights / static_cast<int64_t>(w.row_bytes) / kRowAlign * kRowAlign);
  pool.ParallelFor(w.n_out, kRowAlign, [&](int64_t r0, int64_t r1) {
    for (int64_t b0 = r0; b0 < r1; b0 += rb) {
      const int64_t b1 = std::min(r1, b0 + rb);
      for (int64_t t = 0; t < m; t += kFloatTileTokens) {
        const int nt = static_cast<int>(std::min<int64_t>(kFloatTileTokens, m - t));
        for (int64_t r = b0; r < b1; r += 4) {
          const int nr = static_cast<int>(std::min<int64_t>(4, b1 - r));
          tile(w.data + r * w.row_bytes, w.row_bytes, nr, x + t * w.n_in, w.n_in, nt, w.n_in, y + t * w.n_out + r,
               w.n_out);
        }
      }
    }
  });
}

void MatmulQuant(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
                 float* y) {
  CHECK(k.qgemm != nullptr && k.quantize_token != nullptr);
  const PackedMatrix* pm = w.packed;
  std::unique_ptr<PackedMatrix> tmp;
  if (pm == nullptr) {
    tmp = std::make_unique<PackedMatrix>(PackedMatrix::Pack(w.type, w.data, w.row_bytes, w.n_in, w.n_out));
    pm = tmp.get();
  }
  CHECK(pm->n_in() == w.n_in && pm->n_out() == w.n_out);
  thread_local std::vector<uint8_t> act_buf;
  const QuantActs a = QuantizeActs(x, m, w.n_in, w.n_in, pm->format(), &act_buf, &pool, k.quantize_token);
  const int64_t tb = TokenBlock(w.n_in + 64);
  constexpr int kR = PackedMatrix::kRows;
  // Groups of 16 rows: 64 bytes of output per token, so threads never share
  // a cache line.
  pool.ParallelFor(pm->n_groups(), 1, [&](int64_t g0, int64_t g1) {
    alignas(64) float out[4 * kR];
    for (int64_t t0 = 0; t0 < m; t0 += tb) {
      const int64_t t1 = std::min(m, t0 + tb);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * kR;
        const int nr = static_cast<int>(std::min<int64_t>(kR, w.n_out - r0));
        for (int64_t t = t0; t < t1; t += 4) {
          const int nt = static_cast<int>(std::min<int64_t>(4, t1 - t));
          k.qgemm(*pm, g, a, t, nt, out);
          for (int i = 0; i < nt; ++i) std::copy(out + i * kR, out + i * kR + nr, y + (t + i) * w.n_out + r0);
        }
      }
    }
  });
}

}  // namespace

void Matmul(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
            float* y) {
  if (m <= 0 || w.n_out <= 0) return;
  if (w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16) {
    MatmulFloat(k, pool, w, x, m, y);
  } else {
    MatmulQuant(k, pool, w, x, m, y);
  }
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

void GeluTanhMul(float* g, const float* u, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
  }
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
