// Dense Cholesky factorizations for the calibrated weight solvers (GPTQ,
// SparseGPT): small symmetric matrices in double, row-major. Pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace infera {

// a [n, n] symmetric -> its lower Cholesky factor L (a = L L^T) in the lower
// triangle, in place; false if a is not positive definite.
bool CholeskyLower(double* a, int64_t n);

// The upper Cholesky factor U of H^-1 (U^T U = H^-1), H [n, n] symmetric
// positive definite, in place; false if it is not.
bool UpperCholeskyOfInverse(std::vector<double>* h, int64_t n);

}  // namespace infera
