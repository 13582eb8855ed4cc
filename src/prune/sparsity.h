// Unstructured and N:M pruning of one weight matrix by a per-weight score
// (magnitude, Wanda), and the SparseGPT solver. Pure math on row-major
// matrices W [rows, cols] (GGUF's [n_out, n_in]); no model knowledge.
//
// Conventions (the same in tests/reference/prune_reference.py):
// - Unstructured: each row loses its floor(cols * sparsity) lowest scores;
//   ties go to the lower column index (a stable sort).
// - N:M: in every group of M consecutive columns of a row, the M - N lowest
//   scores are zeroed (2:4 keeps 2 of every 4), ties as above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infera/status.h"

namespace infera::prune {

struct Pattern {
  int n = 0, m = 0;  // keep n of every m; m == 0: unstructured
  bool nm() const { return m > 0; }
  std::string Name() const;
};

// "unstructured", "2:4", "4:8", ... (n < m, m <= 64).
StatusOr<Pattern> ParsePattern(const std::string& s);

// Checks that sparsity and pattern can apply to rows of `cols` weights.
Status CheckShape(int64_t cols, double sparsity, const Pattern& p);

// Zeroes the weights of w [rows, cols] that lose by score [rows, cols] under
// `sparsity` (unstructured) or the N:M pattern.
void PruneByScore(float* w, const double* score, int64_t rows, int64_t cols, double sparsity, const Pattern& p);

// Wanda's score |w_ij| * sqrt(sq_norm[j]) (sq_norm [cols]: the sum over
// calibration tokens of x_j^2), or |w_ij| with sq_norm null (magnitude).
std::vector<double> WeightScores(const float* w, int64_t rows, int64_t cols, const double* sq_norm);

struct SparseGptOptions {
  double sparsity = 0.5;  // unstructured only (N:M implies 1 - n/m)
  Pattern pattern;
  int block_size = 128;   // columns per lazy-update block (a multiple of m)
  double damp = 0.01;     // H += damp * mean(diag H) * I
};

// SparseGPT (Frantar & Alistarh, 2023) on w [rows, cols] in place, given the
// Hessian h [cols, cols] = sum over calibration tokens of x x^T (scale does
// not matter). Columns with zero diagonal (inputs never active) are pruned.
// Unstructured masks are chosen per block of columns over all rows by
// w^2 / diag(H^-1)^2, as the paper's reference code does; N:M per group as
// the columns are reached. Arithmetic in double. Fails if the damped
// Hessian is not positive definite.
Status SparseGpt(float* w, int64_t rows, int64_t cols, std::vector<double> h, const SparseGptOptions& opt,
                 int threads = 1);


// Fraction of exact zeros in x [n].
double ZeroFraction(const float* x, int64_t n);

}  // namespace infera::prune
