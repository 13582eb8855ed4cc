#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
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

UnpackRowFn KernelTable::UnpackFor(DType t) const {
  const auto i = static_cast<size_t>(t);
  return i < unpack.size() ? unpack[i] : nullptr;
}

QuantTraits GetQuantTraits(DType t) {
  switch (t) {
    case DType::kQ8_0: return {true, 7, false};
    case DType::kIQ4_NL: return {true, 7, false};
    case DType::kQ4_0: return {true, 3, false};
    case DType::kQ5_0: return {true, 4, false};
    case DType::kQ6_K: return {true, 5, false};
    case DType::kQ3_K: return {true, 2, false};
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ4_K:
    case DType::kQ5_K: return {true, -1, true};
    default: return {};
  }
}

KernelTable MakeKernelTable(CpuIsa isa) {
  const CpuFeatures f = DetectCpuFeatures();
  const CpuIsa best = f.BestIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  KernelTable t;
  reference::Fill(&t);
  if (isa >= CpuIsa::kAvx2) avx2::Fill(&t);
  if (isa >= CpuIsa::kAvx512) {
    avx512::Fill(&t);
    if (f.avx512vnni) avx512vnni::Fill(&t);
  }
  return t;
}

KernelTable MakeBestKernelTable() { return MakeKernelTable(DetectCpuFeatures().BestIsa()); }

QuantActs QuantizeActs(const float* x, int64_t nt, int64_t ldx, int64_t n, int shift, std::vector<uint8_t>* buf) {
  CHECK(n % 32 == 0);
  const int64_t n_pad = RoundUpToUnit(n);
  // Per token: q n_pad bytes, bias4 n_pad bytes, da16 and ms16 n_pad/4 each.
  const size_t per_tok = static_cast<size_t>(n_pad) * 5 / 2;
  if (buf->size() < per_tok * nt + 64) buf->resize(per_tok * nt + 64);
  uint8_t* base = buf->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* bias4 = reinterpret_cast<int32_t*>(base + nt * n_pad);
  auto* da16 = reinterpret_cast<float*>(base + 2 * nt * n_pad);
  auto* ms16 = da16 + nt * (n_pad / 16);
  const int32_t mul = shift >= 0 ? (1 << shift) : 0;
  for (int64_t t = 0; t < nt; ++t) {
    const float* xt = x + t * ldx;
    int8_t* qt = q + t * n_pad;
    int32_t* bt = bias4 + t * (n_pad / 4);
    float* dt = da16 + t * (n_pad / 16);
    float* mt = ms16 + t * (n_pad / 16);
    for (int64_t b = 0; b < n / 32; ++b) {
      const float* xb = xt + b * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int8_t* qb = qt + b * 32;
      for (int i = 0; i < 32; ++i) qb[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
      for (int g = 0; g < 2; ++g) {
        int32_t s16 = 0;
        for (int l = 0; l < 4; ++l) {
          const int8_t* q4 = qb + g * 16 + l * 4;
          const int32_t s4 = q4[0] + q4[1] + q4[2] + q4[3];
          bt[b * 8 + g * 4 + l] = -s4 * mul;
          s16 += s4;
        }
        dt[b * 2 + g] = d;
        mt[b * 2 + g] = d * static_cast<float>(s16);
      }
    }
    std::memset(qt + n, 0, n_pad - n);
    std::fill(bt + n / 4, bt + n_pad / 4, 0);
    std::fill(dt + n / 16, dt + n_pad / 16, 0.0f);
    std::fill(mt + n / 16, mt + n_pad / 16, 0.0f);
  }
  return QuantActs{n_pad, q, bias4, da16, ms16};
}

namespace {

constexpr int64_t kRowAlign = 16;
constexpr int64_t kL2Budget = 384 * 1024;  // bytes of activations per token block

int64_t TokenBlock(int64_t bytes_per_token) {
  const int64_t tb = kL2Budget / std::max<int64_t>(bytes_per_token, 1);
  return std::clamp<int64_t>(tb / 4 * 4, 4, 256);
}

void MatmulFloat(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
                 float* y) {
  const FloatTileFn tile = k.FloatTileFor(w.type);
  CHECK(tile != nullptr);
  const int64_t tb = TokenBlock(w.n_in * 4);
  pool.ParallelFor(w.n_out, kRowAlign, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < m; t0 += tb) {
      const int64_t t1 = std::min(m, t0 + tb);
      for (int64_t r = r0; r < r1; r += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));
        for (int64_t t = t0; t < t1; t += 4) {
          const int nt = static_cast<int>(std::min<int64_t>(4, t1 - t));
          tile(w.data + r * w.row_bytes, w.row_bytes, nr, x + t * w.n_in, w.n_in, nt, w.n_in, y + t * w.n_out + r,
               w.n_out);
        }
      }
    }
  });
}

void MatmulQuant(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
                 float* y) {
  const QuantTraits tr = GetQuantTraits(w.type);
  const UnpackRowFn unpack = k.UnpackFor(w.type);
  CHECK(tr.supported && unpack != nullptr && k.qdot != nullptr);
  thread_local std::vector<uint8_t> act_buf;
  const QuantActs a = QuantizeActs(x, m, w.n_in, w.n_in, tr.shift, &act_buf);
  const int64_t n_pad = a.n_pad;
  const int64_t tb = TokenBlock(n_pad * 5 / 2);
  pool.ParallelFor(w.n_out, kRowAlign, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<uint8_t> row_buf;
    const size_t need = static_cast<size_t>(n_pad) * 3 / 2 + 64;
    if (row_buf.size() < need) row_buf.resize(need);
    uint8_t* base = row_buf.data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    uint8_t* u = base;
    auto* s16 = reinterpret_cast<float*>(base + n_pad);
    float* m16 = s16 + n_pad / 16;
    for (int64_t t0 = 0; t0 < m; t0 += tb) {
      const int64_t t1 = std::min(m, t0 + tb);
      for (int64_t r = r0; r < r1; ++r) {
        unpack(w.data + r * w.row_bytes, w.n_in, u, s16, m16);
        for (int64_t t = t0; t < t1; t += 4) {
          const int nt = static_cast<int>(std::min<int64_t>(4, t1 - t));
          k.qdot(u, s16, m16, tr.has_min, a, t, nt, y + t * w.n_out + r, w.n_out);
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
