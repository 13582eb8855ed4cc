// base/linalg: OpenBLAS opened on first use, against textbook loops in double.
#include "base/linalg.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace infera::linalg_test {
namespace {

// x [rows, n] with entries in [-1, 1).
std::vector<float> RandomRows(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (float& v : x) v = u(rng);
  return x;
}

TEST(Linalg, LoadsOpenBlas) {
  const Status st = LoadLinalg();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(LoadLinalg().ok());  // the first result, again
}

TEST(Linalg, GramUpperMatchesLoopsAndLeavesTheLowerTriangle) {
  const int64_t rows = 300, n = 37;
  const std::vector<float> x = RandomRows(rows, n, 7);
  std::vector<double> upper(n * n, -5.0);  // the sums start from what is there
  AddGramUpper(x.data(), rows, n, upper.data());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (j < i) {
        EXPECT_EQ(upper[i * n + j], -5.0) << i << "," << j;
        continue;
      }
      double want = -5.0;
      for (int64_t r = 0; r < rows; ++r) want += double{x[r * n + i]} * double{x[r * n + j]};
      EXPECT_NEAR(upper[i * n + j], want, 1e-12 * rows) << i << "," << j;
    }
  }
}

TEST(Linalg, UpperCholeskyOfInverseFactorsTheInverse) {
  const int64_t n = 24;
  const std::vector<float> x = RandomRows(200, n, 11);
  std::vector<double> h(n * n, 0.0);
  AddGramUpper(x.data(), 200, n, h.data());
  for (int64_t i = 0; i < n; ++i) {
    h[i * n + i] += 0.1;
    for (int64_t j = 0; j < i; ++j) h[i * n + j] = h[j * n + i];
  }
  std::vector<double> u = h;
  ASSERT_TRUE(UpperCholeskyOfInverse(&u, n));
  // U upper, and H · (U^T U) = I.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ(u[i * n + j], 0.0);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double hinv_col_j_dot = 0;  // (H · U^T U)[i][j]
      for (int64_t k = 0; k < n; ++k) {
        double utu = 0;  // (U^T U)[k][j]
        for (int64_t m = 0; m < n; ++m) utu += u[m * n + k] * u[m * n + j];
        hinv_col_j_dot += h[i * n + k] * utu;
      }
      EXPECT_NEAR(hinv_col_j_dot, i == j ? 1.0 : 0.0, 1e-9) << i << "," << j;
    }
  }
}

TEST(Linalg, SumOfQuadraticFormsMatchesLoops) {
  // n = 40: the rows in one block of the implementation; n = 1100: blocks of
  // 953 rows, so 2,000 rows take three.
  for (const int64_t n : {int64_t{40}, int64_t{1100}}) {
    const int64_t rows = n == 40 ? 70 : 2000;
    const std::vector<float> x = RandomRows(rows, n, 3);
    const std::vector<float> g = RandomRows(n, n, 5);
    std::vector<double> d(x.begin(), x.end()), h(n * n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i; j < n; ++j) h[i * n + j] = h[j * n + i] = double{g[i * n + j]};
    }
    double want = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double* dr = &d[r * n];
      for (int64_t i = 0; i < n; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += h[i * n + j] * dr[j];
        want += dr[i] * acc;
      }
    }
    const double got = SumOfQuadraticForms(d.data(), rows, n, h.data());
    EXPECT_NEAR(got, want, 1e-9 * std::fabs(want) + 1e-6) << n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j) h[i * n + j] = 1e30;  // the lower triangle is not read
    }
    EXPECT_EQ(SumOfQuadraticForms(d.data(), rows, n, h.data()), got) << n;
  }
  EXPECT_EQ(SumOfQuadraticForms(nullptr, 0, 5, nullptr), 0.0);
}

TEST(Linalg, SubtractProductUsesTheStridesGiven) {
  // c [5, 7] inside a [5, 10] array, a [5, 3] inside [5, 4], b [3, 7] inside [3, 9].
  const int64_t m = 5, n = 7, k = 3, lda = 4, ldb = 9, ldc = 10;
  const std::vector<float> fa = RandomRows(m, lda, 1), fb = RandomRows(k, ldb, 2), fc = RandomRows(m, ldc, 3);
  const std::vector<double> a(fa.begin(), fa.end()), b(fb.begin(), fb.end());
  std::vector<double> c(fc.begin(), fc.end());
  SubtractProduct(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      double want = fc[i * ldc + j];
      if (j < n) {
        for (int64_t p = 0; p < k; ++p) want -= a[i * lda + p] * b[p * ldb + j];
      }
      EXPECT_NEAR(c[i * ldc + j], want, 1e-12) << i << "," << j;  // columns past n untouched
    }
  }
}

TEST(Linalg, ANonPositiveDefiniteMatrixIsRefused) {
  const int64_t n = 3;
  std::vector<double> h = {1, 2, 0, 2, 1, 0, 0, 0, 1};  // eigenvalues 3, -1, 1
  EXPECT_FALSE(UpperCholeskyOfInverse(&h, n));
}

}  // namespace
}  // namespace infera::linalg_test
