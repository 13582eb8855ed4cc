#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "base/check.h"
#include "base/linalg.h"
#include "quant/kquants.h"
#include "quant/quantize.h"
#include "quant/row_tiles.h"
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

// The quantizers the column loop drives. Each fits the parameters of a
// group of columns of one row (Fit, given the group's current values),
// rounds one value against them (Quant: the code and its value), and packs a
// row's codes into blocks (Write). Fit and Quant of different rows may run
// concurrently.

// Legacy 32-blocks: (d, m) per group of `group` columns (a group of 64 or
// 128 repeats its parameters in each of its blocks).
class LegacyQuantizer {
 public:
  LegacyQuantizer(DType t, int64_t rows, int64_t cols, int group)
      : type_(t), grid_(GridOf(t)), cols_(cols), group_(group), params_(static_cast<size_t>(rows * (cols / group))) {}
  int64_t group() const { return group_; }
  void Fit(int64_t r, int64_t c0, const double* x) { params_[r * (cols_ / group_) + c0 / group_] = FitGroup(grid_, x, group_); }
  int Quant(int64_t r, int64_t c, double v, double* back) const {
    return Quantize(grid_, params_[r * (cols_ / group_) + c / group_], v, back);
  }
  void Write(int64_t r, const int8_t* codes, uint8_t* out_row) const {
    const size_t type_size = GetDTypeInfo(type_).type_size;
    for (int64_t b = 0; b < cols_ / 32; ++b) {
      const Params& p = params_[r * (cols_ / group_) + b * 32 / group_];
      PackLegacyBlock(type_, codes + b * 32, static_cast<float>(p.d), static_cast<float>(p.m), out_row + b * type_size);
    }
  }

 private:
  DType type_;
  Grid grid_;
  int64_t cols_;
  int group_;
  std::vector<Params> params_;  // [rows, cols / group]
};

// K-quants, IQ4 and (weighted scales) the legacy 32-blocks: a block's
// scales come from the type's own importance-weighted quantizer run on the
// block's values when it is fitted; the loop then picks each code against
// those fixed scales.
class BlockGridQuantizer {
 public:
  BlockGridQuantizer(DType t, int64_t rows, int64_t cols, std::vector<float> importance)
      : type_(t),
        shape_(kquants::CodeGridShapeOf(t)),
        cols_(cols),
        type_size_(GetDTypeInfo(t).type_size),
        importance_(std::move(importance)),
        blocks_(static_cast<size_t>(rows * (cols / shape_.block)) * type_size_),
        grids_(static_cast<size_t>(rows * (cols / shape_.sub))) {}
  int64_t group() const { return shape_.block; }
  void Fit(int64_t r, int64_t c0, const double* x) {
    float xf[256];  // the largest block
    std::copy(x, x + shape_.block, xf);
    uint8_t* block = &blocks_[static_cast<size_t>(r * (cols_ / shape_.block) + c0 / shape_.block) * type_size_];
    kquants::FitBlock(type_, xf, &importance_[c0], block);
    kquants::ReadSubGrids(type_, block, &grids_[r * (cols_ / shape_.sub) + c0 / shape_.sub]);
  }
  int Quant(int64_t r, int64_t c, double v, double* back) const {
    const kquants::SubGrid& g = grids_[r * (cols_ / shape_.sub) + c / shape_.sub];
    const int code = kquants::NearestCode(shape_, g, static_cast<float>(v));
    *back = kquants::CodeValue(shape_, g, code);
    return code;
  }
  void Write(int64_t r, const int8_t* codes, uint8_t* out_row) const {
    const int64_t n_blocks = cols_ / shape_.block;
    std::memcpy(out_row, &blocks_[static_cast<size_t>(r * n_blocks) * type_size_], n_blocks * type_size_);
    for (int64_t b = 0; b < n_blocks; ++b) {
      kquants::WriteCodes(type_, reinterpret_cast<const uint8_t*>(codes + b * shape_.block), out_row + b * type_size_);
    }
  }

 private:
  DType type_;
  kquants::CodeGridShape shape_;
  int64_t cols_;
  size_t type_size_;
  std::vector<float> importance_;    // [cols]
  std::vector<uint8_t> blocks_;      // [rows, cols / block] fitted blocks
  std::vector<kquants::SubGrid> grids_;  // [rows, cols / sub]
};

bool IsLegacy(DType t) { return GridOf(t).nmax > 0 || GridOf(t).levels > 0; }

}  // namespace

bool GptqSupports(DType t) { return kquants::CodeGridShapeOf(t).block > 0; }

int64_t GptqGroupColumns(DType t, int group) { return IsLegacy(t) ? group : kquants::CodeGridShapeOf(t).block; }

namespace {

// The column loop: w [rows, cols] row-major (f64; left edited, in
// processing order), u [cols, cols] upper with U^T U = H^-1 in processing
// order perm; codes [rows, cols] in the original column order. Each block
// of B columns is quantized tile by tile of 16 rows on `threads` threads
// (the corrections inside the block, rows * cols * B / 2 multiply-adds in
// all); its errors then reach every later column in one BLAS product,
// W[:, i2:] -= Err [rows, B] · U[i1:i2, i2:] (rows * cols^2 / 2 in all).
template <typename Q>
void QuantizeColumns(Q& q, std::vector<double>& w, int64_t rows, int64_t cols, const std::vector<double>& u,
                     const std::vector<int64_t>& perm, bool act_order, int64_t block_size, int threads,
                     std::vector<int8_t>* codes) {
  const int64_t G = q.group();
  if (act_order) {  // static groups, from the original weights; then columns in processing order
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += G) q.Fit(r, c0, &w[r * cols + c0]);
    }
    std::vector<double> wp(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) wp[r * cols + k] = w[r * cols + perm[k]];
    }
    w.swap(wp);
  }
  const int64_t B = block_size;
  std::vector<double> err(static_cast<size_t>(rows * B));  // [rows, B]: the block's scaled errors
  for (int64_t i1 = 0; i1 < cols; i1 += B) {
    const int64_t i2 = std::min(cols, i1 + B);
    ForRowTiles(rows, 16, threads, [&](int64_t r0, int64_t r1) {
      for (int64_t k = i1; k < i2; ++k) {
        const int64_t c = perm[k];
        const double ukk = u[k * cols + k];
        const double* uk = &u[k * cols];
        for (int64_t r = r0; r < r1; ++r) {
          double* wr = &w[r * cols];
          // Without act-order perm is the identity: the group's columns
          // are wr[k .. k + G), already corrected by the earlier errors.
          if (!act_order && c % G == 0) q.Fit(r, c, wr + k);
          double back;
          (*codes)[r * cols + c] = static_cast<int8_t>(q.Quant(r, c, wr[k], &back));
          const double e = (wr[k] - back) / ukk;
          err[r * B + (k - i1)] = e;
          for (int64_t j = k + 1; j < i2; ++j) wr[j] -= e * uk[j];
        }
      }
    });
    SubtractProduct(rows, cols - i2, i2 - i1, err.data(), B, &u[i1 * cols + i2], cols, &w[i2], cols);
  }
}

}  // namespace

Status Gptq(float* w_io, int64_t rows, int64_t cols, std::vector<double> h, const GptqOptions& opt, uint8_t* out,
            int threads) {
  if (!GptqSupports(opt.type)) {
    return InvalidArgument(fmt::format("GPTQ writes q4_0, q4_1, q5_0, q5_1, q8_0, q2_k .. q6_k, iq4_nl or iq4_xs, "
                                       "not {}", DTypeName(opt.type)));
  }
  const bool legacy = IsLegacy(opt.type);
  if (legacy && opt.group != 32 && opt.group != 64 && opt.group != 128) {
    return InvalidArgument("GPTQ group must be 32, 64 or 128");
  }
  const int64_t group = GptqGroupColumns(opt.type, opt.group);
  if (cols % group != 0) {
    return InvalidArgument(fmt::format("GPTQ: {} columns are not a whole number of groups of {}", cols, group));
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
  // The block quantizers' importances: the undamped diagonal (each input's
  // sum of x^2, as an imatrix holds it), scaled to mean 1.
  std::vector<float> importance(cols);
  for (int64_t j = 0; j < cols; ++j) importance[j] = static_cast<float>(h[j * cols + j] / mean_diag);
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
  if (Status st = LoadLinalg(); !st.ok()) return st;
  if (!UpperCholeskyOfInverse(&h, cols)) {
    return InvalidArgument("GPTQ: the damped Hessian is not positive definite (raise --damp)");
  }
  const std::vector<double>& u = h;  // U [cols, cols] upper, U^T U = H^-1 (permuted order)
  std::vector<int8_t> codes(static_cast<size_t>(rows * cols));
  const uint64_t row_bytes = *RowBytes(opt.type, cols);
  auto finish = [&](const auto& q) {
    for (int64_t r = 0; r < rows; ++r) {
      q.Write(r, &codes[r * cols], out + r * row_bytes);
      DequantizeRow(opt.type, out + r * row_bytes, w_io + r * cols, cols);
    }
  };
  if (!legacy || (opt.weighted_scales && opt.group == 32)) {
    BlockGridQuantizer q(opt.type, rows, cols, std::move(importance));
    QuantizeColumns(q, w, rows, cols, u, perm, opt.act_order, opt.block_size, threads, &codes);
    finish(q);
  } else {
    LegacyQuantizer q(opt.type, rows, cols, opt.group);
    QuantizeColumns(q, w, rows, cols, u, perm, opt.act_order, opt.block_size, threads, &codes);
    finish(q);
  }
  return Status::Ok();
}

}  // namespace infera
