// Dense linear algebra for the calibrated weight solvers (GPTQ, SparseGPT):
// symmetric matrices in double, row-major, on OpenBLAS's BLAS and LAPACK
// (blocked and multi-threaded: an n = 5632 Hessian, m1b's FFN width, takes
// seconds instead of the minutes a textbook loop needs). Reentrant; OpenBLAS
// runs each call on its own threads.
#pragma once

#include <cstdint>
#include <vector>

namespace infera {

// The upper Cholesky factor U of H^-1 (U^T U = H^-1), H [n, n] symmetric
// positive definite, in place (zeros below the diagonal); false if it is not.
bool UpperCholeskyOfInverse(std::vector<double>* h, int64_t n);

// upper [n, n] += X^T X on and above the diagonal (below it untouched),
// x [rows, n] in float; the products and sums in double.
void AddGramUpper(const float* x, int64_t rows, int64_t n, double* upper);

}  // namespace infera
