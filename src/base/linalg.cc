#include "base/cholesky.h"

#include <cmath>

namespace infera {

bool CholeskyLower(double* a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  return true;
}

bool UpperCholeskyOfInverse(std::vector<double>* hp, int64_t n) {
  std::vector<double>& h = *hp;
  if (!CholeskyLower(h.data(), n)) return false;  // H = L L^T
  // M = L^-1 (lower), by forward substitution column by column.
  std::vector<double> m(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    m[j * n + j] = 1.0 / h[j * n + j];
    for (int64_t i = j + 1; i < n; ++i) {
      double s = 0;
      for (int64_t k = j; k < i; ++k) s += h[i * n + k] * m[k * n + j];
      m[i * n + j] = -s / h[i * n + i];
    }
  }
  // H^-1 = M^T M: (i, j) = sum_k>=max(i,j) M[k][i] M[k][j].
  std::vector<double> inv(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) {
      double s = 0;
      for (int64_t k = j; k < n; ++k) s += m[k * n + i] * m[k * n + j];
      inv[i * n + j] = inv[j * n + i] = s;
    }
  }
  if (!CholeskyLower(inv.data(), n)) return false;  // H^-1 = C C^T; U = C^T
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) h[i * n + j] = j >= i ? inv[j * n + i] : 0.0;
  }
  return true;
}

}  // namespace infera
