// The importance matrix: both of llama.cpp's file formats round-trip what
// quantize reads, corrupt files are refused, and the importance-weighted
// quantizers lower the importance-weighted rounding error of every type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "quant/imatrix.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"

namespace infera::imatrix_test {
namespace {

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "/imatrix_test_" + name;
}

Imatrix Sample() {
  Imatrix im;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(5 * 64);
  for (float& v : x) v = nd(rng);
  EXPECT_TRUE(im.Add("blk.0.attn_q.weight", 1, 0, x.data(), 5, 64).ok());
  EXPECT_TRUE(im.Add("blk.0.attn_q.weight", 1, 0, x.data(), 3, 64).ok());
  // Four stacked experts; expert 2 never routed to.
  for (int e : {0, 1, 3}) EXPECT_TRUE(im.Add("blk.0.ffn_up_exps.weight", 4, e, x.data() + e, 4, 32).ok());
  im.datasets = {"calib.txt"};
  im.chunk_count = 2;
  im.chunk_size = 4;
  return im;
}

TEST(Imatrix, BothFormatsRoundTripWhatQuantizeReads) {
  Imatrix im = Sample();
  EXPECT_FALSE(im.Add("blk.0.attn_q.weight", 1, 0, nullptr, 0, 65).ok()) << "a width mismatch is an error";
  for (bool legacy : {false, true}) {
    const std::string path = TempPath(legacy ? "rt.dat" : "rt.gguf");
    ASSERT_TRUE(im.Save(path, legacy).ok());
    auto back = Imatrix::Load(path);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->entries.size(), 2u);
    EXPECT_EQ(back->chunk_count, 2u);
    EXPECT_EQ(back->datasets.back(), "calib.txt");
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight"}) {
      const std::vector<float> want = im.Importance(name), got = back->Importance(name);
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * want[i]) << name << " " << i;
    }
    // The expert without data weighs everything 1 (llama-quantize's rule).
    EXPECT_EQ(back->Importance("blk.0.ffn_up_exps.weight")[2 * 32 + 5], 1.0f);
    EXPECT_TRUE(back->Importance("blk.9.attn_q.weight").empty());
  }
}

TEST(Imatrix, CorruptLegacyFilesAreRefused) {
  const std::string path = TempPath("c.dat");
  ASSERT_TRUE(Sample().Save(path, true).ok());
  auto bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  // Every truncation inside the entries is an error, never a crash.
  int errors = 0;
  for (size_t n = 0; n < bytes->size(); n += 7) errors += !Imatrix::ParseLegacy(bytes->substr(0, n), "x").ok();
  EXPECT_GT(errors, static_cast<int>(bytes->size() / 7) - 4);
  std::string huge = *bytes;
  huge[4] = '\x7f';  // the first name's length
  EXPECT_FALSE(Imatrix::ParseLegacy(huge, "x").ok());
  EXPECT_FALSE(Imatrix::ParseLegacy(std::string("\0\0\0\0", 4), "x").ok());
}

// sum_j w_j (x_j - q(x)_j)^2 over rows.
double WeightedError(DType t, const std::vector<float>& x, const std::vector<float>& w, int64_t n, bool weighted) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<uint8_t> q(*RowBytes(t, n));
  std::vector<float> back(n);
  double err = 0;
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(t, x.data() + r * n, q.data(), n, weighted ? w.data() : nullptr);
    DequantizeRow(t, q.data(), back.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      const double d = x[r * n + j] - back[j];
      err += w[j] * d * d;
    }
  }
  return err;
}

TEST(Imatrix, WeightedQuantizersLowerTheWeightedError) {
  const int64_t n = 512, rows = 48;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * rows), w(n);
  for (float& v : x) v = nd(rng);
  for (float& v : w) v = std::exp(2.0f * nd(rng));  // a few columns matter far more
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kIQ3_S,
                  DType::kIQ2_XS}) {
    const double plain = WeightedError(t, x, w, n, false), weighted = WeightedError(t, x, w, n, true);
    EXPECT_LT(weighted, 0.9 * plain) << DTypeName(t);
  }
  // Q8_0 has no weighted algorithm in llama.cpp: the importance is ignored.
  std::vector<uint8_t> a(*RowBytes(DType::kQ8_0, n)), b(a.size());
  QuantizeRow(DType::kQ8_0, x.data(), a.data(), n, w.data());
  QuantizeRow(DType::kQ8_0, x.data(), b.data(), n, nullptr);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace infera::imatrix_test
