#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "base/linalg.h"
#include "quant/quantize.h"
#include "quant/row_tiles.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

// dw [r1 - r0, cols] for rows [r0, r1): the scaled rounding's error,
// Q(w_r * s) / s - w_r, in double.
void RoundingError(const AwqMatrix& m, const std::vector<float>& s, int64_t cols, int64_t r0, int64_t r1, double* dw) {
  std::vector<float> scaled(cols), back(cols);
  std::vector<uint8_t> q(*RowBytes(m.type, cols));
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = m.w + r * cols;
    for (int64_t j = 0; j < cols; ++j) scaled[j] = wr[j] * s[j];
    QuantizeRow(m.type, scaled.data(), q.data(), cols);
    DequantizeRow(m.type, q.data(), back.data(), cols);
    double* out = dw + (r - r0) * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<double>(back[j]) / s[j] - wr[j];
  }
}

// sum over the matrices' rows of dw_r^T H dw_r. The rounding runs on
// `threads` threads a block of rows at a time; the quadratic forms, rows *
// cols^2 multiply-adds, are one BLAS product per block.
double TotalLoss(const std::vector<AwqMatrix>& mats, const std::vector<double>& h, const std::vector<float>& s,
                 int64_t cols, int threads) {
  const int64_t block_rows = std::max<int64_t>(1, (int64_t{1} << 21) / cols);  // dw at most 16 MiB
  std::vector<double> dw;
  double total = 0;
  for (const AwqMatrix& m : mats) {
    for (int64_t b0 = 0; b0 < m.rows; b0 += block_rows) {
      const int64_t nr = std::min(block_rows, m.rows - b0);
      dw.resize(static_cast<size_t>(nr * cols));
      ForRowTiles(nr, 16, threads,
                  [&](int64_t r0, int64_t r1) { RoundingError(m, s, cols, b0 + r0, b0 + r1, dw.data() + r0 * cols); });
      total += SumOfQuadraticForms(dw.data(), nr, cols, h.data());
    }
  }
  return total;
}

}  // namespace

StatusOr<AwqResult> AwqSearch(const std::vector<AwqMatrix>& mats, const std::vector<double>& h, int64_t cols,
                              int n_grid, int threads) {
  if (h.size() != static_cast<size_t>(cols * cols) || n_grid < 1) return InvalidArgument("AWQ: bad arguments");
  for (const AwqMatrix& m : mats) {
    if (!RowBytes(m.type, cols) || !CanDequantize(m.type)) return InvalidArgument("AWQ: a type it cannot round to");
  }
  if (Status st = LoadLinalg(); !st.ok()) return st;
  // The channel magnitudes (RMS up to a constant the normalization removes).
  std::vector<double> a(cols);
  for (int64_t j = 0; j < cols; ++j) a[j] = std::max(std::sqrt(std::max(h[j * cols + j], 0.0)), 1e-8);
  AwqResult best;
  std::vector<float> s(cols);
  for (int g = 0; g < n_grid; ++g) {
    const double alpha = static_cast<double>(g) / n_grid;
    double mx = 0, mn = INFINITY;
    std::vector<double> raw(cols);
    for (int64_t j = 0; j < cols; ++j) {
      raw[j] = std::pow(a[j], alpha);
      mx = std::max(mx, raw[j]);
      mn = std::min(mn, raw[j]);
    }
    const double norm = std::sqrt(mx * mn);
    for (int64_t j = 0; j < cols; ++j) s[j] = static_cast<float>(raw[j] / norm);
    const double loss = TotalLoss(mats, h, s, cols, threads);
    if (g == 0) best.loss_plain = loss;
    if (g == 0 || loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = s;
    }
  }
  return best;
}

}  // namespace infera
