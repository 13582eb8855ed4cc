#include "prune/damp_selection.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"
#include "base/linalg.h"
#include "prune/for_rows.h"

namespace infera::prune {

const std::vector<double>& AutoDampCandidates() {
  static const std::vector<double> kCandidates = {0.01, 0.03, 0.1, 0.3};
  return kCandidates;
}

double ReconstructionError(const float* w0, const float* w1, int64_t rows, int64_t cols, const std::vector<double>& h,
                           int threads) {
  CHECK(h.size() == static_cast<size_t>(cols * cols));
  // D = w0 - w1 in double a block of rows at a time (at most 16 MiB), the
  // quadratic forms one BLAS product per block (SumOfQuadraticForms): rows *
  // cols^2 multiply-adds, which a loop per row took minutes for at m1b's
  // widths. The same total for any thread count (BLAS's own split aside).
  const int64_t block_rows = std::max<int64_t>(1, (int64_t{1} << 21) / cols);
  std::vector<double> d;
  double total = 0;
  for (int64_t b0 = 0; b0 < rows; b0 += block_rows) {
    const int64_t nr = std::min(block_rows, rows - b0);
    d.resize(static_cast<size_t>(nr * cols));
    ForRows(nr, threads, [&](int64_t r0, int64_t r1) {
      for (int64_t i = (b0 + r0) * cols; i < (b0 + r1) * cols; ++i) {
        d[i - b0 * cols] = static_cast<double>(w0[i]) - static_cast<double>(w1[i]);
      }
    });
    total += SumOfQuadraticForms(d.data(), nr, cols, h.data());
  }
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
