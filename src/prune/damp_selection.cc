#include "prune/damp_selection.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"

namespace infera::prune {

const std::vector<double>& AutoDampCandidates() {
  static const std::vector<double> kCandidates = {0.01, 0.03, 0.1, 0.3};
  return kCandidates;
}

double ReconstructionError(const float* w0, const float* w1, int64_t rows, int64_t cols, const std::vector<double>& h,
                           int threads) {
  CHECK(h.size() == static_cast<size_t>(cols * cols));
  // Rows are independent: sum over rows of d_r^T H d_r, in row slices.
  const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows / 8)));
  std::vector<double> part(static_cast<size_t>(n), 0.0);
  auto slice = [&](int t) {
    std::vector<double> d(static_cast<size_t>(cols));
    const int64_t r0 = rows * t / n, r1 = rows * (t + 1) / n;
    double sum = 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        d[c] = static_cast<double>(w0[r * cols + c]) - static_cast<double>(w1[r * cols + c]);
      }
      for (int64_t i = 0; i < cols; ++i) {
        if (d[i] == 0.0) continue;
        const double* hi = &h[i * cols];
        double dot = 0;
        for (int64_t j = 0; j < cols; ++j) dot += hi[j] * d[j];
        sum += d[i] * dot;
      }
    }
    part[t] = sum;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(slice, t);
  slice(0);
  for (auto& th : pool) th.join();
  double total = 0;
  for (double p : part) total += p;
  return total;
}

StatusOr<DampChoice> ChooseSparseGptDamp(const float* w, int64_t rows, int64_t cols, const std::vector<double>& h_fit,
                                         const std::vector<double>& h_check, const SparseGptOptions& opt,
                                         const std::vector<double>& candidates, int threads) {
  CHECK(!candidates.empty());
  DampChoice choice;
  double best = -1;
  Status last = Status::Ok();
  std::vector<float> trial(static_cast<size_t>(rows * cols));
  for (double damp : candidates) {
    std::copy(w, w + rows * cols, trial.begin());
    SparseGptOptions o = opt;
    o.damp = damp;
    if (Status st = SparseGpt(trial.data(), rows, cols, h_fit, o, threads); !st.ok()) {
      last = st;
      choice.errors.push_back(-1.0);
      continue;
    }
    const double err = ReconstructionError(w, trial.data(), rows, cols, h_check, threads);
    choice.errors.push_back(err);
    if (best < 0 || err < best) {
      best = err;
      choice.damp = damp;
    }
  }
  if (best < 0) return Status(last.code(), fmt::format("no --damp auto candidate worked: {}", last.message()));
  return choice;
}

}  // namespace infera::prune
