// Dense linear algebra for the calibrated weight solvers (GPTQ, SparseGPT):
// symmetric matrices in double, row-major, on OpenBLAS's BLAS and LAPACK
// (blocked and multi-threaded: an n = 5632 Hessian, m1b's FFN width, takes
// seconds instead of the minutes a textbook loop needs). Reentrant; OpenBLAS
// runs each call on its own threads.
//
// OpenBLAS is opened on first use (dlopen), not linked: its pthread build
// starts a worker per core from a library constructor, and each worker spins
// on sched_yield for ~0.1 s of CPU before it sleeps. Linked, every infera
// process (server, run, bench, each test's) paid that and the load of
// libgfortran beside it; now only the commands that solve do.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/status.h"

namespace infera {

// Opens OpenBLAS once (thread-safe; later calls return the first result). An
// error names the library and the loader's reason. The functions below call
// it themselves and CHECK it; commands call it before their work so that a
// missing library is a one-line error, not a crash after calibration.
Status LoadLinalg();

// The number of threads OpenBLAS runs each call on from now on (n >= 1;
// process-wide, as OpenBLAS keeps it). Commands pass their -t, so that
// `-t 1` leaves the other cores alone. Opens OpenBLAS if not yet; no effect
// if it cannot be opened.
void SetLinalgThreads(int n);

// The upper Cholesky factor U of H^-1 (U^T U = H^-1), H [n, n] symmetric
// positive definite, in place (zeros below the diagonal); false if it is not
// (*h then holds intermediate values).
bool UpperCholeskyOfInverse(std::vector<double>* h, int64_t n);

// upper [n, n] += X^T X on and above the diagonal (below it untouched),
// x [rows, n] in float; the products and sums in double.
void AddGramUpper(const float* x, int64_t rows, int64_t n, double* upper);

// c [m, n] -= a [m, k] · b [k, n], row-major with row strides lda, ldb, ldc
// (dgemm).
void SubtractProduct(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
                     double* c, int64_t ldc);

// sum over r of d_r^T H d_r: d [rows, n] row-major, h [n, n] symmetric (its
// upper triangle is read). One blocked product D H (dsymm) then a dot per
// row: rows * n^2 multiply-adds at BLAS speed.
double SumOfQuadraticForms(const double* d, int64_t rows, int64_t n, const double* h);

}  // namespace infera
