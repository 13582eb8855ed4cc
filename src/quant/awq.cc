#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "quant/quantize.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

// sum over rows of dw_r^T H dw_r for the scaled rounding of one matrix,
// rows [r0, r1).
double Loss(const AwqMatrix& m, const std::vector<double>& h, const std::vector<float>& s, int64_t cols, int64_t r0,
            int64_t r1) {
  std::vector<float> scaled(cols), back(cols);
  std::vector<uint8_t> q(*RowBytes(m.type, cols));
  std::vector<double> dw(cols);
  double loss = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = m.w + r * cols;
    for (int64_t j = 0; j < cols; ++j) scaled[j] = wr[j] * s[j];
    QuantizeRow(m.type, scaled.data(), q.data(), cols);
    DequantizeRow(m.type, q.data(), back.data(), cols);
    for (int64_t j = 0; j < cols; ++j) dw[j] = static_cast<double>(back[j]) / s[j] - wr[j];
    for (int64_t i = 0; i < cols; ++i) {
      if (dw[i] == 0) continue;
      const double* hi = &h[i * cols];
      double acc = 0;
      for (int64_t j = 0; j < cols; ++j) acc += hi[j] * dw[j];
      loss += dw[i] * acc;
    }
  }
  return loss;
}

double TotalLoss(const std::vector<AwqMatrix>& mats, const std::vector<double>& h, const std::vector<float>& s,
                 int64_t cols, int threads) {
  double total = 0;
  for (const AwqMatrix& m : mats) {
    const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, m.rows / 16)));
    std::vector<double> part(n, 0.0);
    std::vector<std::thread> pool;
    const int64_t per = (m.rows + n - 1) / n;
    for (int t = 0; t < n; ++t) {
      auto job = [&, t] { part[t] = Loss(m, h, s, cols, std::min(m.rows, t * per), std::min(m.rows, (t + 1) * per)); };
      if (t + 1 < n) pool.emplace_back(job);
      else job();
    }
    for (auto& th : pool) th.join();
    for (double p : part) total += p;
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
