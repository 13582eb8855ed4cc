#include "prune/sparsity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "base/check.h"
#include "base/linalg.h"
#include "prune/for_rows.h"

namespace infera::prune {
namespace {

// Zeroes, in one row, the k lowest of score[idx[0..len)] (ties: lower index).
// idx is scratch holding column indices.
void PruneLowest(float* w, const double* score, int64_t* idx, int64_t len, int64_t k) {
  if (k <= 0) return;
  auto less = [score](int64_t a, int64_t b) { return score[a] < score[b] || (score[a] == score[b] && a < b); };
  if (k < len) std::nth_element(idx, idx + k - 1, idx + len, less);
  for (int64_t i = 0; i < std::min(k, len); ++i) w[idx[i]] = 0.0f;
}

}  // namespace

std::string Pattern::Name() const { return nm() ? fmt::format("{}:{}", n, m) : "unstructured"; }

StatusOr<Pattern> ParsePattern(const std::string& s) {
  if (s.empty() || s == "unstructured") return Pattern{};
  int n = 0, m = 0;
  char extra = 0;
  if (std::sscanf(s.c_str(), "%d:%d%c", &n, &m, &extra) != 2 || n <= 0 || m <= n || m > 64) {
    return InvalidArgument("--pattern must be unstructured or N:M with 0 < N < M <= 64 (e.g. 2:4, 4:8), not '" + s + "'");
  }
  return Pattern{n, m};
}

Status CheckShape(int64_t cols, double sparsity, const Pattern& p) {
  if (p.nm()) {
    if (cols % p.m != 0) {
      return InvalidArgument(fmt::format("{} pruning needs rows whose length is a multiple of {}; a row has {}",
                                         p.Name(), p.m, cols));
    }
    return Status::Ok();
  }
  if (!(sparsity > 0.0 && sparsity < 1.0)) return InvalidArgument(fmt::format("--sparsity must be in (0, 1), not {}", sparsity));
  return Status::Ok();
}

std::vector<double> WeightScores(const float* w, int64_t rows, int64_t cols, const double* sq_norm) {
  std::vector<double> s(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double a = std::fabs(static_cast<double>(w[r * cols + c]));
      s[r * cols + c] = sq_norm ? a * std::sqrt(sq_norm[c]) : a;
    }
  }
  return s;
}

void PruneByScore(float* w, const double* score, int64_t rows, int64_t cols, double sparsity, const Pattern& p) {
  std::vector<int64_t> idx(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* wr = w + r * cols;
    const double* sr = score + r * cols;
    if (p.nm()) {
      for (int64_t g = 0; g < cols; g += p.m) {
        std::iota(idx.begin(), idx.begin() + p.m, g);
        PruneLowest(wr, sr, idx.data(), p.m, p.m - p.n);
      }
    } else {
      std::iota(idx.begin(), idx.end(), 0);
      PruneLowest(wr, sr, idx.data(), cols, static_cast<int64_t>(static_cast<double>(cols) * sparsity));
    }
  }
}


Status SparseGpt(float* w_out, int64_t rows, int64_t cols, std::vector<double> h, const SparseGptOptions& opt,
                 int threads) {
  const Pattern& p = opt.pattern;
  RETURN_IF_ERROR(CheckShape(cols, opt.sparsity, p));
  if (opt.block_size <= 0 || (p.nm() && opt.block_size % p.m != 0)) {
    return InvalidArgument(fmt::format("SparseGPT block size {} must be a positive multiple of M", opt.block_size));
  }
  CHECK(h.size() == static_cast<size_t>(cols * cols));
  std::vector<double> w(w_out, w_out + rows * cols);
  double mean_diag = 0;
  for (int64_t j = 0; j < cols; ++j) {
    if (h[j * cols + j] == 0.0) {  // an input that was never active
      h[j * cols + j] = 1.0;
      for (int64_t r = 0; r < rows; ++r) w[r * cols + j] = 0.0;
    }
    mean_diag += h[j * cols + j];
  }
  mean_diag /= static_cast<double>(cols);
  for (int64_t j = 0; j < cols; ++j) h[j * cols + j] += opt.damp * mean_diag;
  if (Status st = LoadLinalg(); !st.ok()) return st;
  if (!UpperCholeskyOfInverse(&h, cols)) {
    return InvalidArgument("SparseGPT: the damped Hessian is not positive definite (raise --damp)");
  }
  const std::vector<double>& u = h;  // U [cols, cols], upper: U^T U = H^-1
  const int64_t B = opt.block_size;
  std::vector<double> w1, err1, tmp;
  std::vector<uint8_t> mask;
  for (int64_t i1 = 0; i1 < cols; i1 += B) {
    const int64_t i2 = std::min(cols, i1 + B), cnt = i2 - i1;
    w1.resize(rows * cnt);
    err1.assign(rows * cnt, 0.0);
    mask.assign(rows * cnt, 0);
    for (int64_t r = 0; r < rows; ++r) std::copy(&w[r * cols + i1], &w[r * cols + i2], &w1[r * cnt]);
    if (!p.nm()) {  // one threshold over the whole block
      tmp.resize(rows * cnt);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cnt; ++k) {
          const double d = u[(i1 + k) * cols + i1 + k];
          tmp[r * cnt + k] = w1[r * cnt + k] * w1[r * cnt + k] / (d * d);
        }
      }
      std::vector<double> sorted = tmp;
      const auto at = static_cast<int64_t>(static_cast<double>(rows * cnt) * opt.sparsity);
      std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
      const double thresh = sorted[at];
      for (int64_t i = 0; i < rows * cnt; ++i) mask[i] = tmp[i] <= thresh;
    }
    ForRows(rows, threads, [&](int64_t r0, int64_t r1) {
      std::vector<double> score(p.nm() ? p.m : 0);
      std::vector<int64_t> idx(p.nm() ? p.m : 0);
      for (int64_t r = r0; r < r1; ++r) {
        double* wr = &w1[r * cnt];
        uint8_t* mr = &mask[r * cnt];
        for (int64_t k = 0; k < cnt; ++k) {
          if (p.nm() && k % p.m == 0) {
            for (int j = 0; j < p.m; ++j) {
              const double d = u[(i1 + k + j) * cols + i1 + k + j];
              score[j] = wr[k + j] * wr[k + j] / (d * d);
            }
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return score[a] < score[b]; });
            for (int j = 0; j < p.m - p.n; ++j) mr[k + idx[j]] = 1;
          }
          const double* urow = &u[(i1 + k) * cols + i1];
          const double q = mr[k] ? 0.0 : wr[k];
          const double e = (wr[k] - q) / urow[k];
          for (int64_t j = k; j < cnt; ++j) wr[j] -= e * urow[j];
          wr[k] = q;
          err1[r * cnt + k] = e;
        }
        for (int64_t k = 0; k < cnt; ++k) w[r * cols + i1 + k] = wr[k];  // the block's pruned values
      }
    });
    // The lazy update of the columns after the block, all rows in one
    // product: W[:, i2:] -= Err [rows, cnt] · U[i1:i2, i2:].
    SubtractProduct(rows, cols - i2, cnt, err1.data(), cnt, &u[i1 * cols + i2], cols, &w[i2], cols);
  }
  for (int64_t i = 0; i < rows * cols; ++i) w_out[i] = static_cast<float>(w[i]);
  return Status::Ok();
}

double ZeroFraction(const float* x, int64_t n) {
  int64_t z = 0;
  for (int64_t i = 0; i < n; ++i) z += x[i] == 0.0f;
  return n > 0 ? static_cast<double>(z) / static_cast<double>(n) : 0.0;
}

}  // namespace infera::prune
