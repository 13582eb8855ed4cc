#include "base/linalg.h"

#include <cblas.h>  // declarations and enums only: the symbols come from dlsym
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>

#include "base/check.h"

namespace infera {
namespace {

// LAPACK's Fortran interface (OpenBLAS exports it; Debian ships no C header
// for it beside OpenBLAS). The trailing size_t is the hidden length of each
// character argument, as gfortran passes it.
using LapackSymmetricFn = void (*)(const char* uplo, const int* n, double* a, const int* lda, int* info,
                                   size_t uplo_len);
using LapackTriangularFn = void (*)(const char* uplo, const char* diag, const int* n, double* a, const int* lda,
                                    int* info, size_t uplo_len, size_t diag_len);

// The entry points used, resolved once; immutable afterwards. The library
// stays loaded for the life of the process (never dlclose'd).
struct OpenBlas {
  decltype(&cblas_dsyrk) dsyrk = nullptr;
  decltype(&cblas_dsymm) dsymm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  LapackSymmetricFn dpotrf = nullptr;
  LapackTriangularFn dtrtri = nullptr;
  void (*set_num_threads)(int) = nullptr;  // optional: OpenBLAS's own extension
  std::string error;  // empty when the entry points above are set
};

OpenBlas Open() {
  OpenBlas lib;
  // Debian's soname (update-alternatives picks the build behind it), then the
  // pkg-config directory the binary was built against.
  const std::string candidates[] = {"libopenblas.so.0", std::string(INFERA_OPENBLAS_LIBDIR) + "/libopenblas.so.0",
                                    std::string(INFERA_OPENBLAS_LIBDIR) + "/libopenblas.so"};
  void* handle = nullptr;
  std::string reasons;
  for (const std::string& name : candidates) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    reasons += reasons.empty() ? "" : "; ";
    reasons += why != nullptr ? why : name;
  }
  if (handle == nullptr) {
    lib.error = "OpenBLAS could not be loaded (install libopenblas0): " + reasons;
    return lib;
  }
  lib.dsyrk = reinterpret_cast<decltype(&cblas_dsyrk)>(dlsym(handle, "cblas_dsyrk"));
  lib.dsymm = reinterpret_cast<decltype(&cblas_dsymm)>(dlsym(handle, "cblas_dsymm"));
  lib.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(handle, "cblas_dgemm"));
  lib.dpotrf = reinterpret_cast<LapackSymmetricFn>(dlsym(handle, "dpotrf_"));
  lib.dtrtri = reinterpret_cast<LapackTriangularFn>(dlsym(handle, "dtrtri_"));
  lib.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
  if (lib.dsyrk == nullptr || lib.dsymm == nullptr || lib.dgemm == nullptr || lib.dpotrf == nullptr ||
      lib.dtrtri == nullptr) {
    lib.error = "the loaded OpenBLAS lacks one of cblas_dsyrk, cblas_dsymm, cblas_dgemm, dpotrf_, dtrtri_";
  }
  return lib;
}

const OpenBlas& Library() {
  static const OpenBlas lib = Open();  // C++11 guarantees one thread-safe initialization
  return lib;
}

// The library, or a CHECK failure naming why not (callers that report errors
// cleanly call LoadLinalg first).
const OpenBlas& Blas() {
  const OpenBlas& lib = Library();
  if (!lib.error.empty()) {
    std::fprintf(stderr, "infera: %s\n", lib.error.c_str());
    CHECK(lib.error.empty());
  }
  return lib;
}

// LAPACK is column-major: a row-major symmetric matrix is its own transpose,
// so the row-major lower triangle is LAPACK's "U" and the upper one its "L".
bool Potrf(char lapack_uplo, double* a, int64_t n) {
  CHECK(n >= 0 && n <= (int64_t{1} << 30));
  const int ni = static_cast<int>(n);
  int info = 0;
  Blas().dpotrf(&lapack_uplo, &ni, a, &ni, &info, 1);
  CHECK(info >= 0);  // < 0: an argument is wrong, a bug here
  return info == 0;
}

}  // namespace

Status LoadLinalg() {
  const OpenBlas& lib = Library();
  if (!lib.error.empty()) return Unavailable(lib.error);
  return Status::Ok();
}

void SetLinalgThreads(int n) {
  const OpenBlas& lib = Library();
  if (lib.error.empty() && lib.set_num_threads != nullptr) lib.set_num_threads(std::max(1, n));
}

// With J the reversal of indices, J H J = L L^T (Cholesky, L lower) gives
// H = M M^T with M = J L J upper, so H^-1 = (M^-1)^T M^-1: U = M^-1 =
// J L^-1 J. One factorization and one triangular inverse (2n^3/3 flops),
// where factor, invert H, factor again cost 4n^3/3. J H J of a row-major
// matrix is its element array reversed.
bool UpperCholeskyOfInverse(std::vector<double>* hp, int64_t n) {
  std::vector<double>& h = *hp;
  CHECK(static_cast<int64_t>(h.size()) == n * n);
  if (n == 0) return true;
  std::reverse(h.begin(), h.end());  // J H J
  // LAPACK "L" of the column-major matrix (H is symmetric): L in the
  // row-major upper triangle, transposed.
  if (!Potrf('L', h.data(), n)) return false;
  const int ni = static_cast<int>(n);
  int info = 0;
  Blas().dtrtri("L", "N", &ni, h.data(), &ni, &info, 1, 1);  // L^-1 in place
  CHECK(info >= 0);
  if (info > 0) return false;  // a zero pivot (potrf succeeded, so not expected)
  // Reversed back, the row-major lower triangle holds U transposed:
  // element [j][i] (j >= i) is U[i][j].
  std::reverse(h.begin(), h.end());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      h[i * n + j] = h[j * n + i];
      h[j * n + i] = 0.0;
    }
  }
  return true;
}

void AddGramUpper(const float* x, int64_t rows, int64_t n, double* upper) {
  if (rows <= 0 || n <= 0) return;
  CHECK(n <= (int64_t{1} << 30));
  // Rows converted to double a block at a time (at most ~8 MiB of copies).
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 20) / n));
  std::vector<double> xd(static_cast<size_t>(block * n));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t nr = std::min(block, rows - r0);
    std::copy(x + r0 * n, x + (r0 + nr) * n, xd.begin());
    // C [n, n] += A^T A, A = xd [nr, n], row-major upper triangle.
    Blas().dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(n), static_cast<int>(nr), 1.0, xd.data(),
                 static_cast<int>(n), 1.0, upper, static_cast<int>(n));
  }
}

void SubtractProduct(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
                     double* c, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const int64_t limit = int64_t{1} << 30;
  CHECK(m <= limit && n <= limit && k <= limit && lda <= limit && ldb <= limit && ldc <= limit);
  CHECK(lda >= k && ldb >= n && ldc >= n);
  Blas().dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
               -1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 1.0, c, static_cast<int>(ldc));
}

double SumOfQuadraticForms(const double* d, int64_t rows, int64_t n, const double* h) {
  if (rows <= 0 || n <= 0) return 0.0;
  CHECK(n <= (int64_t{1} << 30));
  // D H a block of rows at a time (at most ~8 MiB of products).
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 20) / n));
  std::vector<double> dh(static_cast<size_t>(block * n));
  const int ni = static_cast<int>(n);
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t nr = std::min(block, rows - r0);
    // DH [nr, n] = D [nr, n] · H [n, n], H symmetric on the right.
    Blas().dsymm(CblasRowMajor, CblasRight, CblasUpper, static_cast<int>(nr), ni, 1.0, h, ni, d + r0 * n, ni, 0.0,
                 dh.data(), ni);
    for (int64_t i = 0; i < nr * n; ++i) total += d[r0 * n + i] * dh[i];
  }
  return total;
}

}  // namespace infera
