// Float-weight matmuls with bf16 products (`--matmul-dtype bf16`,
// KernelTable::bf16_tile_*): every ISA's tiles against the scalar definition
// (kernels.h, Bf16TileFn) bit for bit, the definition against a double dot
// within bf16's rounding, and Matmul with bf16 products batch-, thread- and
// ISA-invariant, quantized matrices untouched. And the tile form a tile
// unit runs (AMX-BF16, Bf16TileRowsFn): its kernel on a software model of
// the instructions bit for bit against its scalar definition, the definition
// within f32 rounding of an exact dot, Matmul with it batch- and
// thread-invariant; the hardware kernel where the CPU has AMX-BF16.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/cpu_features.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference_kernels.h"
#include "tensor/fp16.h"
#include "unit/test_util.h"

namespace infera::matmul_bf16_test {
namespace {

using testing::AvailableIsas;
using testing::RandomVec;

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const int64_t kSizes[] = {1, 2, 7, 16, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 4097};

// Rows of n weights of a float type from N(0, 1).
std::vector<uint8_t> FloatWeights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  const size_t esz = t == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> w(rows * n * esz);
  for (int64_t i = 0; i < rows * n; ++i) {
    const float v = nd(rng);
    if (t == DType::kF32) {
      std::memcpy(&w[i * 4], &v, 4);
    } else {
      const uint16_t h = t == DType::kF16 ? Fp32ToFp16(v) : Fp32ToBf16(v);
      std::memcpy(&w[i * 2], &h, 2);
    }
  }
  return w;
}

float WeightAt(DType t, const uint8_t* row, int64_t i) {
  if (t == DType::kF32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return t == DType::kF16 ? Fp16ToFp32(h) : Bf16ToFp32(h);
}

// Tokens' activations as the driver gives them: bf16 rows of ldx, zero past n.
std::vector<uint16_t> RoundedRows(const KernelTable& k, const std::vector<float>& x, int64_t toks, int64_t n,
                                  int64_t ldx) {
  std::vector<uint16_t> xb(toks * ldx, 0);
  for (int64_t t = 0; t < toks; ++t) k.round_bf16(x.data() + t * n, n, xb.data() + t * ldx);
  return xb;
}

class MatmulBf16Test : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(MatmulBf16Test, RoundingMatchesTheDefinitionExactly) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(3);
  std::vector<float> x = RandomVec(1003, rng, 10.0f);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), 1.00390625f, 1.01171875f, 3.0e38f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{1003}}) {
    std::vector<uint16_t> a(n, 1), b(n, 2);
    ref.round_bf16(x.data(), n, a.data());
    k.round_bf16(x.data(), n, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), n * 2), 0) << "n=" << n;
  }
}

TEST_P(MatmulBf16Test, WeightRowConversionMatchesTheDefinitionExactly) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(4);
  for (DType t : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{1003}}) {
      auto w = FloatWeights(t, 1, n, rng);
      if (t == DType::kF32) {  // a denormal, which rounds to zero
        const float d = 1e-40f;
        std::memcpy(w.data(), &d, 4);
      }
      std::vector<uint16_t> a(n, 1), b(n, 2);
      ref.row_to_bf16(t, w.data(), n, a.data());
      k.row_to_bf16(t, w.data(), n, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), n * 2), 0) << DTypeName(t) << " n=" << n;
      for (int64_t i = 0; i < n; ++i) {
        const bool denormal = t == DType::kF32 && i == 0;
        ASSERT_EQ(a[i], denormal ? uint16_t{0} : Fp32ToBf16(WeightAt(t, w.data(), i))) << DTypeName(t) << " " << i;
      }
    }
  }
}

TEST_P(MatmulBf16Test, TilesMatchTheDefinitionExactly) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  const CpuFeatures f = DetectCpuFeatures();
  if (GetParam() >= CpuIsa::kAvx512 && f.avx512bf16) {
    EXPECT_STREQ(k.matmul_bf16_variant, "avx512bf16-dpbf16");
  }
  std::mt19937 rng(5);
  for (DType t : kFloatTypes) {
    for (int64_t n : kSizes) {
      const int rows = 4, toks = 6;
      const int64_t ldx = RoundUpToBf16Step(n) + 32;  // a wider stride than needed
      const size_t rb = t == DType::kF32 ? 4 * n : 2 * n;
      auto w = FloatWeights(t, rows, n, rng);
      auto x = RandomVec(toks * n, rng);
      auto xb = RoundedRows(ref, x, toks, n, ldx);
      for (int nr : {1, 3, 4}) {
        for (int nt : {1, 2, 5, 6}) {
          std::vector<float> y_ref(toks * rows, -1), y(toks * rows, -1);
          ref.Bf16TileFor(t)(w.data(), rb, nr, xb.data(), ldx, nt, n, y_ref.data(), rows);
          k.Bf16TileFor(t)(w.data(), rb, nr, xb.data(), ldx, nt, n, y.data(), rows);
          ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0)
              << DTypeName(t) << " n=" << n << " nr=" << nr << " nt=" << nt;
        }
      }
      // The definition against a double dot of the rounded operands: only the
      // f32 sums' rounding differs (bf16 products are exact in f32).
      for (int r = 0; r < rows; ++r) {
        float y;
        ref.Bf16TileFor(t)(w.data() + r * rb, rb, 1, xb.data(), ldx, 1, n, &y, 1);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double wi = Bf16ToFp32(Fp32ToBf16(WeightAt(t, w.data() + r * rb, i)));
          const double xi = Bf16ToFp32(xb[i]);
          exact += wi * xi;
          mag += std::fabs(wi * xi);
        }
        EXPECT_NEAR(y, exact, 1e-6 * mag + 1e-30) << DTypeName(t) << " n=" << n;
      }
    }
  }
}

// Matmul with bf16 products: one token alone == in a batch == in chunks, 1
// or 2 threads, every ISA == the reference; within bf16's precision of the
// f32 products; quantized weights give exactly what they give without it.
TEST_P(MatmulBf16Test, MatmulIsBatchThreadAndIsaInvariant) {
  KernelTable k = MakeKernelTable(GetParam());
  KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable f32 = k;
  k.matmul_bf16 = ref.matmul_bf16 = true;
  std::mt19937 rng(13);
  ThreadPool p1(1), p2(2);
  for (DType t : kFloatTypes) {
    for (int64_t n_in : {int64_t{64}, int64_t{100}, int64_t{257}}) {
      const int64_t n_out = 75, m = 40;
      auto w = FloatWeights(t, n_out, n_in, rng);
      WeightMatrix W{t, n_in, n_out, w.data(), static_cast<size_t>(t == DType::kF32 ? 4 * n_in : 2 * n_in)};
      auto x = RandomVec(m * n_in, rng);
      std::vector<float> y1(m * n_out), y2(m * n_out), y_ref(m * n_out), y_f32(m * n_out), y_one(n_out);
      Matmul(k, p1, W, x.data(), m, y1.data());
      Matmul(k, p2, W, x.data(), m, y2.data());
      Matmul(ref, p2, W, x.data(), m, y_ref.data());
      Matmul(f32, p2, W, x.data(), m, y_f32.data());
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << DTypeName(t);
      EXPECT_EQ(std::memcmp(y1.data(), y_ref.data(), y1.size() * 4), 0) << DTypeName(t);
      EXPECT_NE(std::memcmp(y1.data(), y_f32.data(), y1.size() * 4), 0) << "bf16 products were not used";
      double err = 0, scale = 0;
      for (size_t i = 0; i < y1.size(); ++i) {
        err = std::max(err, std::fabs(double(y1[i]) - y_f32[i]));
        scale = std::max(scale, std::fabs(double(y_f32[i])));
      }
      EXPECT_LT(err, 2e-2 * scale) << DTypeName(t) << " n_in=" << n_in;
      for (int64_t row : {int64_t{0}, int64_t{17}, int64_t{39}}) {
        Matmul(k, p2, W, x.data() + row * n_in, 1, y_one.data());
        EXPECT_EQ(std::memcmp(y_one.data(), y1.data() + row * n_out, n_out * 4), 0)
            << DTypeName(t) << " n_in=" << n_in << " row " << row;
      }
      std::vector<float> yc(m * n_out);
      Matmul(k, p2, W, x.data(), 7, yc.data());
      Matmul(k, p2, W, x.data() + 7 * n_in, m - 7, yc.data() + 7 * n_out);
      EXPECT_EQ(std::memcmp(yc.data(), y1.data(), yc.size() * 4), 0) << DTypeName(t);
    }
  }
  // Q8_0 weights: the flag changes nothing.
  const int64_t n_in = 64, n_out = 32, m = 5;
  std::vector<uint8_t> q(n_out * (n_in / 32) * 34);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < q.size() / 34; ++b) {
    const uint16_t d = Fp32ToFp16(0.01f);
    std::memcpy(&q[b * 34], &d, 2);
  }
  WeightMatrix Q{DType::kQ8_0, n_in, n_out, q.data(), static_cast<size_t>(n_in / 32 * 34)};
  auto x = RandomVec(m * n_in, rng);
  std::vector<float> a(m * n_out), b(m * n_out);
  Matmul(k, p2, Q, x.data(), m, a.data());
  Matmul(f32, p2, Q, x.data(), m, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// The tile form's operands and result for every type, row count (one or two
// groups of 16, partial ones), token count (one or two A tiles, partial
// ones) and length (partial steps of 32).
struct TileCase {
  DType t;
  int64_t n;
  int nr;
  int64_t m;
};
std::vector<TileCase> TileCases() {
  std::vector<TileCase> cases;
  for (DType t : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{100}, int64_t{257}}) {
      for (int nr : {1, 5, 16, 17, 32}) {
        for (int64_t m : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{32}, int64_t{40}}) {
          cases.push_back({t, n, nr, m});
        }
      }
    }
    cases.push_back({t, 4097, 32, 33});
  }
  return cases;
}

// y [m, nr] by `fn` on weights w and activations xb (ldx) of the case
// (their pairs transposed by the reference, rows of m + 3).
std::vector<float> RunTileRows(Bf16TileRowsFn fn, const TileCase& c, const std::vector<uint8_t>& w,
                               const std::vector<uint16_t>& xb, int64_t ldx) {
  const size_t rb = c.t == DType::kF32 ? 4 * c.n : 2 * c.n;
  const int64_t ld2 = c.m + 3;
  std::vector<uint32_t> x2(RoundUpToBf16Step(c.n) / 2 * ld2, 0xFFFFFFFFu);
  reference::Bf16Pairs(xb.data(), ldx, c.m, c.n, x2.data(), ld2);
  std::vector<float> y(c.m * c.nr, -1.0f);
  fn(c.t, w.data(), rb, c.nr, x2.data(), ld2, c.m, c.n, y.data(), c.nr);
  return y;
}

TEST(MatmulBf16TileForm, EmulatedTileKernelMatchesTheDefinitionExactly) {
  if (!DetectCpuFeatures().avx512bf16) GTEST_SKIP() << "the tile kernel's weight conversion needs AVX512-BF16";
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(21);
  for (const TileCase& c : TileCases()) {
    const int64_t ldx = RoundUpToBf16Step(c.n) + 32;
    auto w = FloatWeights(c.t, c.nr, c.n, rng);
    if (c.t == DType::kF32) {  // a denormal weight, which rounds to zero
      const float d = 1e-40f;
      std::memcpy(w.data(), &d, 4);
    }
    auto x = RandomVec(c.m * c.n, rng);
    auto xb = RoundedRows(ref, x, c.m, c.n, ldx);
    const auto want = RunTileRows(reference::Bf16TileRows, c, w, xb, ldx);
    const auto got = RunTileRows(amx::Bf16TileRowsEmulated(), c, w, xb, ldx);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << DTypeName(c.t) << " n=" << c.n << " nr=" << c.nr << " m=" << c.m;
  }
}

TEST(MatmulBf16TileForm, PairTransposeMatchesTheDefinitionExactly) {
  if (!DetectCpuFeatures().avx512bf16) GTEST_SKIP() << "the AMX file's transpose needs AVX-512";
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(25);
  for (int64_t n : {int64_t{1}, int64_t{32}, int64_t{33}, int64_t{100}}) {
    for (int64_t m : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{40}}) {
      const int64_t ldx = RoundUpToBf16Step(n) + 32, ld2 = m + 5;
      auto x = RandomVec(m * n, rng);
      auto xb = RoundedRows(ref, x, m, n, ldx);
      std::vector<uint32_t> a(RoundUpToBf16Step(n) / 2 * ld2, 7), b = a;
      reference::Bf16Pairs(xb.data(), ldx, m, n, a.data(), ld2);
      amx::Bf16PairsAvx512()(xb.data(), ldx, m, n, b.data(), ld2);
      ASSERT_EQ(a, b) << "n=" << n << " m=" << m;
      EXPECT_EQ(a[ld2 + m - 1] & 0xFFFF, xb[(m - 1) * ldx + 2]) << "pair 1 of the last token";
      EXPECT_EQ(a[m - 1] >> 16, xb[(m - 1) * ldx + 1]);
    }
  }
}

// One sequential f32 sum of exact products: within n roundings of the sum
// of magnitudes of an exact dot; and not the 16-lane form's bits.
TEST(MatmulBf16TileForm, DefinitionIsWithinF32RoundingOfAnExactDot) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(22);
  int differs = 0;
  for (DType t : kFloatTypes) {
    for (int64_t n : kSizes) {
      const int64_t ldx = RoundUpToBf16Step(n);
      const size_t rb = t == DType::kF32 ? 4 * n : 2 * n;
      auto w = FloatWeights(t, 1, n, rng);
      auto x = RandomVec(n, rng);
      auto xb = RoundedRows(ref, x, 1, n, ldx);
      float y, y16;
      std::vector<uint32_t> x2(ldx / 2);
      reference::Bf16Pairs(xb.data(), ldx, 1, n, x2.data(), 1);
      reference::Bf16TileRows(t, w.data(), rb, 1, x2.data(), 1, 1, n, &y, 1);
      ref.Bf16TileFor(t)(w.data(), rb, 1, xb.data(), ldx, 1, n, &y16, 1);
      differs += std::memcmp(&y, &y16, 4) != 0;
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = double(Bf16ToFp32(Fp32ToBf16(WeightAt(t, w.data(), i)))) * Bf16ToFp32(xb[i]);
        exact += p;
        mag += std::fabs(p);
      }
      EXPECT_LE(std::fabs(y - exact), double(n) * 0x1p-24 * mag + 1e-30) << DTypeName(t) << " n=" << n;
    }
  }
  EXPECT_GT(differs, 0) << "the tile form never differed from the 16-lane form";
}

// Matmul with a tile-form kernel: the emulated tile kernel gives the scalar
// definition's bits through the driver; one token alone == in a batch == in
// chunks, 1 or 2 threads.
TEST(MatmulBf16TileForm, MatmulIsBatchAndThreadInvariant) {
  if (!DetectCpuFeatures().avx512bf16) GTEST_SKIP() << "the tile kernel's weight conversion needs AVX512-BF16";
  KernelTable k = MakeKernelTable(CpuIsa::kAvx512), ref = MakeKernelTable(CpuIsa::kScalar);
  k.matmul_bf16 = ref.matmul_bf16 = true;
  k.bf16_tile_rows = amx::Bf16TileRowsEmulated();
  k.bf16_pairs = amx::Bf16PairsAvx512();
  ref.bf16_tile_rows = reference::Bf16TileRows;
  ref.bf16_pairs = reference::Bf16Pairs;
  std::mt19937 rng(23);
  ThreadPool p1(1), p2(2);
  for (DType t : kFloatTypes) {
    const int64_t n_in = 100, n_out = 75, m = 40;
    auto w = FloatWeights(t, n_out, n_in, rng);
    WeightMatrix W{t, n_in, n_out, w.data(), static_cast<size_t>(t == DType::kF32 ? 4 * n_in : 2 * n_in)};
    auto x = RandomVec(m * n_in, rng);
    std::vector<float> y1(m * n_out), y2(m * n_out), y_ref(m * n_out), y_one(n_out), yc(m * n_out);
    Matmul(k, p1, W, x.data(), m, y1.data());
    Matmul(k, p2, W, x.data(), m, y2.data());
    Matmul(ref, p2, W, x.data(), m, y_ref.data());
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << DTypeName(t);
    EXPECT_EQ(std::memcmp(y1.data(), y_ref.data(), y1.size() * 4), 0) << DTypeName(t);
    for (int64_t row : {int64_t{0}, int64_t{17}, int64_t{39}}) {
      Matmul(k, p2, W, x.data() + row * n_in, 1, y_one.data());
      EXPECT_EQ(std::memcmp(y_one.data(), y1.data() + row * n_out, n_out * 4), 0) << DTypeName(t) << " " << row;
    }
    Matmul(k, p2, W, x.data(), 7, yc.data());
    Matmul(k, p2, W, x.data() + 7 * n_in, m - 7, yc.data() + 7 * n_out);
    EXPECT_EQ(std::memcmp(yc.data(), y1.data(), yc.size() * 4), 0) << DTypeName(t);
  }
}

// The AMX-BF16 kernel itself, where the CPU has it: within f32 rounding of
// the scalar definition (the SDM's pseudo-code; whether the silicon adds in
// exactly its order is printed, not assumed), and batch invariant exactly.
TEST(MatmulBf16TileForm, HardwareTilesWhereTheCpuHasThem) {
  const CpuFeatures f = DetectCpuFeatures();
  const KernelTable k = f.MaxIsa() >= CpuIsa::kAmx ? MakeKernelTable(CpuIsa::kAmx) : KernelTable{};
  if (k.bf16_tile_rows == nullptr) {
    std::printf("[ info ] no AMX-BF16 here (cpu: %s): the hardware tile kernel is not run\n", f.ToString().c_str());
    GTEST_SKIP() << "no AMX-BF16";
  }
  EXPECT_STREQ(k.matmul_bf16_variant, "amx-bf16");
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(24);
  size_t same = 0, total = 0;
  for (const TileCase& c : TileCases()) {
    const int64_t ldx = RoundUpToBf16Step(c.n) + 32;
    auto w = FloatWeights(c.t, c.nr, c.n, rng);
    auto x = RandomVec(c.m * c.n, rng);
    auto xb = RoundedRows(ref, x, c.m, c.n, ldx);
    const auto want = RunTileRows(reference::Bf16TileRows, c, w, xb, ldx);
    const auto got = RunTileRows(k.bf16_tile_rows, c, w, xb, ldx);
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t tok = static_cast<int64_t>(i) / c.nr, r = static_cast<int64_t>(i) % c.nr;
      double mag = 0;
      for (int64_t e = 0; e < c.n; ++e) {
        mag += std::fabs(
            double(Bf16ToFp32(Fp32ToBf16(WeightAt(c.t, w.data() + r * (c.t == DType::kF32 ? 4 : 2) * c.n, e)))) *
            Bf16ToFp32(xb[tok * ldx + e]));
      }
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), 2.0 * double(c.n) * 0x1p-24 * mag + 1e-30)
          << DTypeName(c.t) << " n=" << c.n << " nr=" << c.nr << " m=" << c.m << " [" << tok << ", " << r << "]";
      same += std::memcmp(&got[i], &want[i], 4) == 0;
      ++total;
    }
    // Each token alone gives its bits in the batch.
    for (int64_t tok : {int64_t{0}, c.m - 1}) {
      std::vector<float> one(c.nr);
      const size_t rb = c.t == DType::kF32 ? 4 * c.n : 2 * c.n;
      std::vector<uint32_t> x2(ldx / 2);
      k.bf16_pairs(xb.data() + tok * ldx, ldx, 1, c.n, x2.data(), 1);
      k.bf16_tile_rows(c.t, w.data(), rb, c.nr, x2.data(), 1, 1, c.n, one.data(), c.nr);
      ASSERT_EQ(std::memcmp(one.data(), got.data() + tok * c.nr, c.nr * 4), 0)
          << DTypeName(c.t) << " n=" << c.n << " nr=" << c.nr << " m=" << c.m << " token " << tok;
    }
  }
  std::printf("[ info ] AMX-BF16: %zu of %zu outputs bit-identical to the SDM pseudo-code's order\n", same, total);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MatmulBf16Test, ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& i) { return std::string(CpuIsaName(i.param)); });

}  // namespace
}  // namespace infera::matmul_bf16_test
