#include "prune/damp_selection.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"
#include "prune/for_rows.h"

namespace infera::prune {

const std::vector<double>& AutoDampCandidates() {
  static const std::vector<double> kCandidates = {0.01, 0.03, 0.1, 0.3};
  return kCandidates;
}

double ReconstructionError(const float* w0, const float* w1, int64_t rows, int64_t cols, const std::vector<double>& h,
                           int threads) {
  CHECK(h.size() == static_cast<size_t>(cols * cols));
  // Rows are independent: d_r^T H d_r per row, summed in row order (the same
  // total for any thread count).
  std::vector<double> row_err(static_cast<size_t>(rows), 0.0);
  ForRows(rows, threads, [&](int64_t r0, int64_t r1) {
    std::vector<double> d(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        d[c] = static_cast<double>(w0[r * cols + c]) - static_cast<double>(w1[r * cols + c]);
      }
      for (int64_t i = 0; i < cols; ++i) {
        if (d[i] == 0.0) continue;
        const double* hi = &h[i * cols];
        double dot = 0;
        for (int64_t j = 0; j < cols; ++j) dot += hi[j] * d[j];
        row_err[r] += d[i] * dot;
      }
    }
  });
  double total = 0;
  for (double e : row_err) total += e;
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
