// Chooses SparseGPT's damping by held-out reconstruction error (`--damp
// auto`). The damping added to the Hessian's diagonal regularizes the
// least-squares update; with few calibration tokens per input channel the
// paper's 1 % over-fits them, while too much forgets the correlations. The
// calibration inputs X are split in two halves A and B: each candidate prunes
// W with H_A = X_A^T X_A and is scored by how well the pruned W' reproduces
// W on the unseen half, ||(W - W') X_B^T||^2 = tr((W - W') H_B (W - W')^T).
#pragma once

#include <cstdint>
#include <vector>

#include "infera/status.h"
#include "prune/sparsity.h"

namespace infera::prune {

// The candidates `--damp auto` tries (fractions of the mean Hessian diagonal).
const std::vector<double>& AutoDampCandidates();

// tr(D H D^T) with D = w0 - w1, all [rows, cols]; h [cols, cols] symmetric.
double ReconstructionError(const float* w0, const float* w1, int64_t rows, int64_t cols, const std::vector<double>& h,
                           int threads = 1);

struct DampChoice {
  double damp = 0;
  std::vector<double> errors;  // per candidate; < 0 where the damped H_A was not positive definite
};

// Prunes copies of w [rows, cols] with h_fit under opt (its damp replaced by
// each candidate) and returns the candidate with the lowest
// ReconstructionError under h_check (ties: the smaller damp). Fails if no
// candidate succeeds.
StatusOr<DampChoice> ChooseSparseGptDamp(const float* w, int64_t rows, int64_t cols, const std::vector<double>& h_fit,
                                         const std::vector<double>& h_check, const SparseGptOptions& opt,
                                         const std::vector<double>& candidates, int threads = 1);

}  // namespace infera::prune
