// Every ISA variant of every kernel against the scalar reference, over many
// shapes (odd sizes and tails), plus batch/thread invariance of Matmul.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "tensor/fp16.h"

namespace infera {
namespace {

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> v = {CpuIsa::kScalar};
  const CpuIsa best = DetectCpuFeatures().BestIsa();
  if (best >= CpuIsa::kAvx2) v.push_back(CpuIsa::kAvx2);
  if (best >= CpuIsa::kAvx512) v.push_back(CpuIsa::kAvx512);
  return v;
}

std::vector<uint8_t> RandomWeights(DType t, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0, 1);
  const size_t esz = t == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> w(n * esz);
  for (int64_t i = 0; i < n; ++i) {
    const float x = d(rng);
    if (t == DType::kF32) std::memcpy(&w[i * 4], &x, 4);
    else {
      uint16_t h = t == DType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
      std::memcpy(&w[i * 2], &h, 2);
    }
  }
  return w;
}

const int64_t kSizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 257, 1000, 4097};

class KernelIsaTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(KernelIsaTest, DotRowsMatchReference) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  ASSERT_EQ(k.isa, GetParam());
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 1);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : kSizes) {
      const int64_t rows = 5;
      auto w = RandomWeights(t, rows * n, rng);
      std::vector<float> x(n);
      for (auto& v : x) v = d(rng);
      std::vector<float> y_ref(rows), y(rows);
      const size_t row_bytes = n * (t == DType::kF32 ? 4 : 2);
      ref.DotRowsFor(t)(w.data(), row_bytes, rows, x.data(), n, y_ref.data());
      k.DotRowsFor(t)(w.data(), row_bytes, rows, x.data(), n, y.data());
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_NEAR(y[r], y_ref[r], 1e-5 * std::sqrt(static_cast<double>(n)) * 4)
            << DTypeName(t) << " n=" << n << " row " << r;
      }
    }
  }
}

TEST_P(KernelIsaTest, DotAndAxpyMatchReference) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 1);
  for (int64_t n : kSizes) {
    std::vector<float> a(n), b(n), y1(n), y2(n);
    for (int64_t i = 0; i < n; ++i) { a[i] = d(rng); b[i] = d(rng); y1[i] = y2[i] = d(rng); }
    EXPECT_NEAR(k.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n), 1e-4 * std::sqrt(double(n)));
    ref.axpy_f32(0.37f, a.data(), y1.data(), n);
    k.axpy_f32(0.37f, a.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-6) << n;
  }
}

// Batch invariance: the output row of one token is bit-identical whether it
// is computed alone (M = 1) or inside a batch of 64, with 1 or 2 threads.
TEST_P(KernelIsaTest, MatmulIsBatchAndThreadInvariant) {
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0, 1);
  ThreadPool p1(1), p2(2);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n_in : {64, 100, 257}) {
      const int64_t n_out = 75, m = 64;
      auto w = RandomWeights(t, n_in * n_out, rng);
      WeightMatrix W{t, n_in, n_out, w.data(), static_cast<size_t>(n_in * (t == DType::kF32 ? 4 : 2))};
      std::vector<float> x(m * n_in);
      for (auto& v : x) v = d(rng);
      std::vector<float> y_batch1(m * n_out), y_batch2(m * n_out), y_one(n_out);
      Matmul(k, p1, W, x.data(), m, y_batch1.data());
      Matmul(k, p2, W, x.data(), m, y_batch2.data());
      EXPECT_EQ(std::memcmp(y_batch1.data(), y_batch2.data(), y_batch1.size() * 4), 0);
      for (int64_t row : {0L, 17L, 63L}) {
        Matmul(k, p2, W, x.data() + row * n_in, 1, y_one.data());
        EXPECT_EQ(std::memcmp(y_one.data(), y_batch1.data() + row * n_out, n_out * 4), 0)
            << DTypeName(t) << " n_in=" << n_in << " row " << row;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelIsaTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

TEST(Kernels, RmsNormSiluSoftmax) {
  std::vector<float> x = {1, -2, 3, -4}, w = {1, 1, 2, 0.5f}, y(4);
  RmsNorm(x.data(), w.data(), y.data(), 4, 0.0f);
  const float rms = std::sqrt((1 + 4 + 9 + 16) / 4.0f);
  EXPECT_NEAR(y[2], 2 * 3 / rms, 1e-6);
  std::vector<float> g = {0, 1}, u = {2, 3};
  SiluMul(g.data(), u.data(), 2);
  EXPECT_NEAR(g[0], 0, 1e-7);
  EXPECT_NEAR(g[1], 3 / (1 + std::exp(-1.0f)), 1e-6);
  std::vector<float> s = {1000, 1000, -INFINITY};
  Softmax(s.data(), 3);
  EXPECT_NEAR(s[0], 0.5, 1e-7);
  EXPECT_EQ(s[2], 0);
}

}  // namespace
}  // namespace infera
