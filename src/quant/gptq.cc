#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"
#include "base/cholesky.h"
#include "quant/quantize.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

// How a type maps values to codes: symmetric code = q + nmax for q in
// [-nmax, nmax - 1] (Q8_0: q itself in [-128, 127]); asymmetric code in
// [0, levels].
struct Grid {
  bool asym = false;
  int nmax = 0;    // symmetric
  int levels = 0;  // asymmetric
  bool q8 = false;
};

Grid GridOf(DType t) {
  switch (t) {
    case DType::kQ4_0: return {false, 8, 0, false};
    case DType::kQ5_0: return {false, 16, 0, false};
    case DType::kQ8_0: return {false, 128, 0, true};
    case DType::kQ4_1: return {true, 0, 15, false};
    case DType::kQ5_1: return {true, 0, 31, false};
    default: return {};
  }
}

double RoundToF16(double v) { return Fp16ToFp32(Fp32ToFp16(static_cast<float>(v))); }

struct Params {
  double d = 0, m = 0;  // value = code' * d + m (code' the signed value for symmetric types)
};

Params FitGroup(const Grid& g, const double* x, int64_t n) {
  Params p;
  if (g.asym) {
    const auto [mn, mx] = std::minmax_element(x, x + n);
    p.d = RoundToF16((*mx - *mn) / g.levels);
    p.m = RoundToF16(*mn);
  } else if (g.q8) {
    double amax = 0;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    p.d = RoundToF16(amax / 127);
  } else {
    double max = 0, amax = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    p.d = RoundToF16(max / -g.nmax);
  }
  return p;
}

// The stored code of v and its dequantized value.
int Quantize(const Grid& g, const Params& p, double v, double* back) {
  if (p.d == 0) {
    *back = g.asym ? p.m : 0.0;
    return g.asym ? 0 : (g.q8 ? 0 : g.nmax);
  }
  if (g.asym) {
    const int q = static_cast<int>(std::clamp(std::nearbyint((v - p.m) / p.d), 0.0, static_cast<double>(g.levels)));
    *back = q * p.d + p.m;
    return q;
  }
  const double lo = g.q8 ? -128 : -g.nmax, hi = g.q8 ? 127 : g.nmax - 1;
  const int q = static_cast<int>(std::clamp(std::nearbyint(v / p.d), lo, hi));
  *back = q * p.d;
  return g.q8 ? q : q + g.nmax;
}

template <typename Fn>
void ForTiles(int64_t rows, int64_t tile, int threads, Fn&& fn) {
  const int64_t n_tiles = (rows + tile - 1) / tile;
  const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n_tiles)));
  auto work = [&](int t) {
    for (int64_t i = t; i < n_tiles; i += n) fn(i * tile, std::min(rows, (i + 1) * tile));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
}

}  // namespace

bool GptqSupports(DType t) { return GridOf(t).nmax > 0 || GridOf(t).levels > 0; }

Status Gptq(float* w_io, int64_t rows, int64_t cols, std::vector<double> h, const GptqOptions& opt, uint8_t* out,
            int threads) {
  const Grid grid = GridOf(opt.type);
  if (!GptqSupports(opt.type)) {
    return InvalidArgument(fmt::format("GPTQ writes q4_0, q4_1, q5_0, q5_1 or q8_0, not {}", DTypeName(opt.type)));
  }
  if (opt.group != 32 && opt.group != 64 && opt.group != 128) return InvalidArgument("GPTQ group must be 32, 64 or 128");
  if (cols % opt.group != 0) {
    return InvalidArgument(fmt::format("GPTQ: {} columns are not a whole number of groups of {}", cols, opt.group));
  }
  if (opt.block_size <= 0 || !(opt.damp > 0)) return InvalidArgument("GPTQ: bad block size or damping");
  CHECK(h.size() == static_cast<size_t>(cols * cols));
  std::vector<double> w(w_io, w_io + rows * cols);
  double mean_diag = 0;
  for (int64_t j = 0; j < cols; ++j) {
    if (h[j * cols + j] == 0.0) {  // an input never active: its weights do not matter
      h[j * cols + j] = 1.0;
      for (int64_t r = 0; r < rows; ++r) w[r * cols + j] = 0.0;
    }
    mean_diag += h[j * cols + j];
  }
  mean_diag /= static_cast<double>(cols);
  for (int64_t j = 0; j < cols; ++j) h[j * cols + j] += opt.damp * mean_diag;

  // perm[k]: the original column processed k-th.
  std::vector<int64_t> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h[a * cols + a] > h[b * cols + b]; });
    std::vector<double> hp(h.size());
    for (int64_t i = 0; i < cols; ++i) {
      for (int64_t j = 0; j < cols; ++j) hp[i * cols + j] = h[perm[i] * cols + perm[j]];
    }
    h.swap(hp);
  }
  if (!UpperCholeskyOfInverse(&h, cols)) {
    return InvalidArgument("GPTQ: the damped Hessian is not positive definite (raise --damp)");
  }
  const std::vector<double>& u = h;  // U [cols, cols] upper, U^T U = H^-1 (permuted order)
  const int64_t n_groups = cols / opt.group;
  std::vector<Params> params(static_cast<size_t>(rows * n_groups));
  if (opt.act_order) {  // static groups, from the original weights
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < n_groups; ++g) params[r * n_groups + g] = FitGroup(grid, &w[r * cols + g * opt.group], opt.group);
    }
  }
  std::vector<int8_t> codes(static_cast<size_t>(rows * cols));
  std::vector<double> deq(static_cast<size_t>(rows * cols));
  const int64_t B = opt.block_size;
  ForTiles(rows, 16, threads, [&](int64_t r0, int64_t r1) {
    const int64_t T = r1 - r0;
    std::vector<double> wp(T * cols), err(T * B);
    for (int64_t r = 0; r < T; ++r) {
      for (int64_t k = 0; k < cols; ++k) wp[r * cols + k] = w[(r0 + r) * cols + perm[k]];
    }
    for (int64_t i1 = 0; i1 < cols; i1 += B) {
      const int64_t i2 = std::min(cols, i1 + B);
      for (int64_t k = i1; k < i2; ++k) {
        const int64_t c = perm[k], g = c / opt.group;
        const double ukk = u[k * cols + k];
        for (int64_t r = 0; r < T; ++r) {
          double* wr = &wp[r * cols];
          Params& p = params[(r0 + r) * n_groups + g];
          if (!opt.act_order && c % opt.group == 0) p = FitGroup(grid, wr + k, opt.group);
          double back;
          codes[(r0 + r) * cols + c] = static_cast<int8_t>(Quantize(grid, p, wr[k], &back));
          deq[(r0 + r) * cols + c] = back;
          const double e = (wr[k] - back) / ukk;
          err[r * B + (k - i1)] = e;
          const double* uk = &u[k * cols];
          for (int64_t j = k + 1; j < i2; ++j) wr[j] -= e * uk[j];
        }
      }
      // The block's errors, fed into every later column at once.
      for (int64_t r = 0; r < T; ++r) {
        double* wr = &wp[r * cols];
        for (int64_t k = i1; k < i2; ++k) {
          const double e = err[r * B + (k - i1)];
          const double* uk = &u[k * cols];
          for (int64_t j = i2; j < cols; ++j) wr[j] -= e * uk[j];
        }
      }
    }
  });
  const uint64_t row_bytes = *RowBytes(opt.type, cols);
  const int64_t per_block = 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / per_block; ++b) {
      const Params& p = params[r * n_groups + b * per_block / opt.group];
      PackLegacyBlock(opt.type, &codes[r * cols + b * per_block], static_cast<float>(p.d), static_cast<float>(p.m),
                      out + r * row_bytes + b * GetDTypeInfo(opt.type).type_size);
    }
    for (int64_t c = 0; c < cols; ++c) w_io[r * cols + c] = static_cast<float>(deq[r * cols + c]);
  }
  return Status::Ok();
}

}  // namespace infera
