// Every ISA variant of every kernel against the scalar reference, over many
// shapes (odd sizes and tails): bit-identical, since the reference defines the
// lane structure and every ISA reproduces it. The reference itself is checked
// against double-precision dot products of the dequantized weights. Plus
// batch/thread invariance of Matmul for every weight type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avxvnni/avxvnni_kernels.h"
#include "kernels/exp_generic.h"
#include "kernels/kernels.h"
#include "kernels/qgemm_dispatch.h"
#include "unit/test_util.h"
#include "kernels/reference/reference_kernels.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera::kernels_test {
namespace {

using testing::AvailableIsas;
using testing::RandomVec;

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const DType kQuantTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kIQ4_NL, DType::kIQ4_XS,
                             DType::kIQ3_S, DType::kIQ2_XS, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kW8A8};

// Offsets of the f16 scale fields inside one block of each type.
std::vector<int> HalfFields(DType t) {
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {0};
  }
}

// Random weights of any type: random bits in the quants, sane f16 scales.
std::vector<uint8_t> RandomWeights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const DTypeInfo& info = GetDTypeInfo(t);
  const size_t row_bytes = *RowBytes(t, n);
  std::vector<uint8_t> w(rows * row_bytes);
  std::normal_distribution<float> nd(0, 1);
  if (!info.quantized) {
    for (int64_t i = 0; i < rows * n; ++i) {
      const float x = nd(rng);
      if (t == DType::kF32) std::memcpy(&w[i * 4], &x, 4);
      else {
        const uint16_t h = t == DType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
        std::memcpy(&w[i * 2], &h, 2);
      }
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (size_t b = 0; b < w.size() / info.type_size; ++b) {
    for (int off : HalfFields(t)) {
      const uint16_t h = Fp32ToFp16(scale(rng) * (off == 2 || off == 82 ? -1.0f : 1.0f) * 0.5f);
      std::memcpy(&w[b * info.type_size + off], &h, 2);
    }
  }
  if (t == DType::kW8A8) {  // one scale per row: block 0's
    const int64_t nb = n / 32;
    for (int64_t b = 0; b < rows * nb; ++b) std::memcpy(&w[b * 34], &w[(b / nb) * nb * 34], 2);
  }
  return w;
}

// The table's quantized matmul for a packed format.
QGemmFn QGemmFor(const KernelTable& k, const PackFormat& f) { return f.row_scale ? k.qgemm_row : k.qgemm; }

std::vector<int64_t> QuantSizes(DType t) {
  if (GetDTypeInfo(t).block_size == 256) return {256, 512, 768, 2560};
  return {32, 64, 96, 160, 224, 256, 288, 480, 960};
}

const int64_t kFloatSizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 257, 1000, 4097};

double DotDouble(DType t, const uint8_t* row, const float* x, int64_t n) {
  std::vector<float> w(n);
  DequantizeRow(t, row, w.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * x[i];
  return s;
}

class KernelIsaTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(KernelIsaTest, FloatTilesMatchReferenceExactly) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  ASSERT_EQ(k.isa, GetParam());
  std::mt19937 rng(7);
  for (DType t : kFloatTypes) {
    for (int64_t n : kFloatSizes) {
      // Every tile shape a kernel table's FloatTileFn takes (nr <= 4, nt <= 6).
      const int rows = 4, toks = 6;
      auto w = RandomWeights(t, rows, n, rng);
      auto x = RandomVec(toks * n, rng);
      const size_t rb = *RowBytes(t, n);
      for (int nr = 1; nr <= rows; ++nr) {
        for (int nt = 1; nt <= toks; ++nt) {
          std::vector<float> y_ref(toks * rows, -1), y(toks * rows, -1);
          ref.FloatTileFor(t)(w.data(), rb, nr, x.data(), n, nt, n, y_ref.data(), rows);
          k.FloatTileFor(t)(w.data(), rb, nr, x.data(), n, nt, n, y.data(), rows);
          ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0) << DTypeName(t) << " n=" << n;
        }
      }
      for (int r = 0; r < rows; ++r) {
        std::vector<float> y(1);
        ref.FloatTileFor(t)(w.data() + r * rb, rb, 1, x.data(), n, 1, n, y.data(), 1);
        EXPECT_NEAR(y[0], DotDouble(t, w.data() + r * rb, x.data(), n), 1e-5 * std::sqrt(double(n)) * 4);
      }
    }
  }
}

TEST_P(KernelIsaTest, DotAndAxpyMatchReference) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(3);
  for (int64_t n : kFloatSizes) {
    auto a = RandomVec(n, rng), b = RandomVec(n, rng), y1 = RandomVec(n, rng);
    auto y2 = y1;
    EXPECT_EQ(k.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n)) << n;
    ref.axpy_f32(0.37f, a.data(), y1.data(), n);
    k.axpy_f32(0.37f, a.data(), y2.data(), n);
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), n * 4), 0) << n;
  }
}

TEST_P(KernelIsaTest, AttendHeadMatchesReferenceExactly) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(13);
  for (int head_dim : {16, 64, 80, 100, 128}) {
    const int64_t stride = 3 * head_dim + 5, n_pos = 37;
    auto cache_k = RandomVec(n_pos * stride, rng), cache_v = RandomVec(n_pos * stride, rng);
    auto q = RandomVec(head_dim, rng);
    std::vector<int32_t> slots(n_pos);
    for (int i = 0; i < n_pos; ++i) slots[i] = (i * 17) % n_pos;  // scattered rows
    for (int32_t first : {0, 5}) {
      for (int32_t last : {0, 6, 36}) {
        if (last < first) continue;
        std::vector<float> s1(n_pos), s2(n_pos), o1(head_dim), o2(head_dim);
        ref.attend_head(q.data(), cache_k.data() + 3, cache_v.data() + 3, stride, head_dim, 0.125f, 0.0f, slots.data(),
                        first, last, s1.data(), o1.data());
        k.attend_head(q.data(), cache_k.data() + 3, cache_v.data() + 3, stride, head_dim, 0.125f, 0.0f, slots.data(),
                      first, last, s2.data(), o2.data());
        ASSERT_EQ(std::memcmp(o1.data(), o2.data(), head_dim * 4), 0) << head_dim << " " << first << ".." << last;
      }
    }
  }
}

// The packed form (via the scalar unpackers) means the same weights as the
// GGUF blocks: s * (u - 2^shift) + m == dequantized value, for every row,
// including a last group padded with zero rows.
TEST(PackedMatrix, LutTablesAreTheFormatsValuesPlus128) {
  const int iq2xs[6] = {-43, -25, -8, 8, 25, 43};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(int{kIq4NlU[i]}, kIq4nlValues[i] + 128) << i;
    EXPECT_EQ(int{kIq3sU[i]}, 2 * i - 15 + 128) << i;
    EXPECT_EQ(int{kIq2xsU[i]}, (i < 6 ? iq2xs[i] : 0) + 128) << i;
  }
}

// The packed layout holds no more than the file's blocks (f16 or factored
// scales as the file stores them), so decode reads no more bytes than the
// file has; the codebook types (IQ3_S 1.27x, IQ2_XS 2.0x) and W8A8 are wider
// (docs/design.md).
TEST(PackedMatrix, LeanTypesAreAtMostTheFileSize) {
  std::mt19937 rng(5);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS}) {
    const int64_t rows = 32, n = 1024;
    auto w = RandomWeights(t, rows, n, rng);
    const size_t file = *RowBytes(t, n) * rows;
    const PackedMatrix pm = PackedMatrix::Pack(t, w.data(), *RowBytes(t, n), n, rows);
    EXPECT_LE(static_cast<double>(pm.bytes()), 1.03 * static_cast<double>(file)) << DTypeName(t);
  }
  // The codebook types keep 4-bit codes (the file's 9-bit grid indices per 8
  // or 4 weights cannot be unpacked in registers by one table lookup); their
  // scales are factored: IQ3_S 4.375 bits per weight (file 3.4375), IQ2_XS 4.625
  // (file 2.3125; 6 with f32 scales).
  for (auto [t, bound] : {std::pair{DType::kIQ3_S, 1.28}, std::pair{DType::kIQ2_XS, 2.01}}) {
    const int64_t rows = 32, n = 1024;
    auto w = RandomWeights(t, rows, n, rng);
    const size_t file = *RowBytes(t, n) * rows;
    const PackedMatrix pm = PackedMatrix::Pack(t, w.data(), *RowBytes(t, n), n, rows);
    EXPECT_LE(static_cast<double>(pm.bytes()), bound * static_cast<double>(file)) << DTypeName(t);
  }
}

// PackedGeometry::BlockAt gives, for every k-block, the pointers
// ForEachBlock passes (y[0]: how many differed), for each format the
// kernels instantiate.
struct BlockAtChecker {
  template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut = false>
  static void Run(const PackedMatrix& w, int64_t group, const QuantActs&, int64_t, int, float* y) {
    using G = PackedGeometry<kBits, kBlock, kMin, kF16, kFac>;
    const uint8_t* base = w.Block(group, 0);
    int bad = 0, seen = 0;
    G::ForEachBlock(base, w.n_blocks(), [&](const uint8_t* q, const uint8_t* s, const uint8_t* sup, int64_t b) {
      const uint8_t *q2, *s2, *sup2;
      G::BlockAt(base, b, &q2, &s2, &sup2);
      bad += (q != q2) + (s != s2) + (sup != sup2) + (b != seen++);
    });
    y[0] = static_cast<float>(bad + (seen != w.n_blocks()));
  }
};

TEST(PackedMatrix, BlockAtIsForEachBlocksAddresses) {
  std::mt19937 rng(3);
  for (DType t : kQuantTypes) {
    for (int64_t n : QuantSizes(t)) {
      const PackFormat f = GetPackFormat(t);
      auto w = RandomWeights(t, 32, n, rng);
      const PackedMatrix pm = PackedMatrix::Pack(t, w.data(), *RowBytes(t, n), n, 32);
      if (pm.format().sparse24 || pm.format().sparse_mask) continue;  // their own geometries
      float bad = -1;
      DispatchPackFormat<BlockAtChecker>(pm, 1, QuantActs{}, 0, 1, &bad);
      EXPECT_EQ(bad, 0.0f) << DTypeName(t) << " n=" << n << " row_scale=" << f.row_scale;
    }
  }
}

TEST(PackedMatrix, PacksEveryTypeFaithfully) {
  std::mt19937 rng(5);
  for (DType t : kQuantTypes) {
    const PackFormat f = GetPackFormat(t);
    ASSERT_TRUE(f.supported) << DTypeName(t);
    for (int64_t n : QuantSizes(t)) {
      const int64_t rows = 21;
      auto w = RandomWeights(t, rows, n, rng);
      const size_t rb = *RowBytes(t, n);
      const PackedMatrix pm = PackedMatrix::Pack(t, w.data(), rb, n, rows);
      ASSERT_EQ(pm.n_groups(), 2);
      const float off = f.shift >= 0 ? static_cast<float>(1 << f.shift) : 0.0f;
      std::vector<float> deq(n);
      for (int64_t row = 0; row < 32; ++row) {
        if (row < rows) DequantizeRow(t, w.data() + row * rb, deq.data(), n);
        const int r = static_cast<int>(row % 16);
        for (int64_t e = 0; e < n; ++e) {
          const uint8_t* blk = pm.Block(row / 16, e / f.block);
          const int u = PackedMatrix::Quant(f, blk, r, static_cast<int>(e % f.block));
          if (row >= rows) {  // padding: zero bytes (lookup types: code 0), zero scale
            ASSERT_EQ(u, f.lut ? int{f.lut_u[0]} : 0);
            ASSERT_EQ(pm.Scale(row / 16, e / f.block, r), 0.0f);
            continue;
          }
          const int64_t g = row / 16, b = e / f.block;
          const float v = pm.Scale(g, b, r) * (static_cast<float>(u) - off) + (f.has_min ? pm.Min(g, b, r) : 0.0f);
          ASSERT_NEAR(v, deq[e], 1e-6f + 1e-6f * std::fabs(deq[e])) << DTypeName(t) << " row " << row << " e " << e;
        }
      }
    }
  }
}

// Every packed format, n and token count: the table's qgemm gives the
// reference's bytes.
void ExpectQGemmMatchesReference(const KernelTable& k) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(9);
  for (DType t : kQuantTypes) {
    const PackFormat f = GetPackFormat(t);
    for (int64_t n : QuantSizes(t)) {
      const int toks = f.row_scale ? kMaxRowTileTokens : 4;
      const int64_t rows = 16;
      auto w = RandomWeights(t, rows, n, rng);
      const size_t rb = *RowBytes(t, n);
      const PackedMatrix pm = PackedMatrix::Pack(t, w.data(), rb, n, rows);
      auto x = RandomVec(toks * n, rng);
      std::vector<uint8_t> buf;
      const QuantActs a = QuantizeActs(x.data(), toks, n, n, f, &buf);
      for (int nt = 1; nt <= toks; ++nt) {
        std::vector<float> y_ref(toks * 16, -1), y(toks * 16, -1);
        QGemmFor(ref, f)(pm, 0, a, 0, nt, y_ref.data());
        QGemmFor(k, f)(pm, 0, a, 0, nt, y.data());
        ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0) << DTypeName(t) << " n=" << n << " nt=" << nt;
      }
      if (k.qgemm_tile16 != nullptr && !pm.format().row_scale && !pm.format().sparse24 &&
          !pm.format().sparse_mask) {
        // The tile kernel: up to 16 tokens per call, from any first token,
        // the reference's bytes for each.
        constexpr int kToks = kQGemmTileTokens + 3;
        auto x16 = RandomVec(kToks * n, rng);
        std::vector<uint8_t> buf16;
        const QuantActs a16 = QuantizeActs(x16.data(), kToks, n, n, f, &buf16);
        for (int t0 : {0, 3}) {
          for (int nt = 1; nt <= kQGemmTileTokens; ++nt) {
            std::vector<float> y_ref(kQGemmTileTokens * 16, -1), y(kQGemmTileTokens * 16, -1);
            for (int t = 0; t < nt; t += 4) ref.qgemm(pm, 0, a16, t0 + t, std::min(4, nt - t), y_ref.data() + 16 * t);
            k.qgemm_tile16(pm, 0, a16, t0, nt, y.data());
            ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0)
                << k.qgemm_tile16_variant << " " << DTypeName(t) << " n=" << n << " t0=" << t0 << " nt=" << nt;
          }
        }
      }
      // The integer dot approximates the exact one within the 8-bit
      // activation rounding (|dq| <= da / 2 per element).
      std::vector<float> y(toks * 16);
      QGemmFor(ref, f)(pm, 0, a, 0, toks, y.data());
      std::vector<float> deq(n);
      for (int r = 0; r < rows; ++r) {
        DequantizeRow(t, w.data() + r * rb, deq.data(), n);
        for (int i = 0; i < toks; ++i) {
          double bound = 0;
          for (int64_t e = 0; e < n; ++e) bound += std::fabs(deq[e]) * a.Da(i)[e / a.block] * 0.5;
          EXPECT_NEAR(y[i * 16 + r], DotDouble(t, w.data() + r * rb, x.data() + i * n, n), bound * 1.01 + 1e-4)
              << DTypeName(t) << " n=" << n;
        }
      }
    }
  }
}

TEST_P(KernelIsaTest, QuantGemmMatchesReferenceExactly) { ExpectQGemmMatchesReference(MakeKernelTable(GetParam())); }

// The ISA levels' names round-trip, and the default level never exceeds
// what --cpu-isa accepts (AMX is opt-in: never the default).
TEST(Kernels, IsaLevelsParseAndTheDefaultIsNeverAmx) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    CpuIsa parsed = CpuIsa::kScalar;
    ASSERT_TRUE(ParseCpuIsa(CpuIsaName(isa), &parsed)) << CpuIsaName(isa);
    EXPECT_EQ(parsed, isa);
  }
  CpuIsa parsed = CpuIsa::kScalar;
  EXPECT_FALSE(ParseCpuIsa("avx9", &parsed));
  const CpuFeatures f = DetectCpuFeatures();
  EXPECT_LE(static_cast<int>(f.BestIsa()), static_cast<int>(f.MaxIsa()));
  EXPECT_NE(f.BestIsa(), CpuIsa::kAmx);
  EXPECT_EQ(f.MaxIsa() == CpuIsa::kAmx, f.amx_tile && f.amx_int8 && f.BestIsa() == CpuIsa::kAvx512 && f.avx512vnni);
  // Asking for more than the CPU has gives its most.
  EXPECT_EQ(MakeKernelTable(CpuIsa::kAmx).isa, f.MaxIsa());
}

// Each quantized-matmul variant the CPU can run, including those its best
// ISA level shadows (plain AVX2 under AVX-VNNI, AVX-VNNI under AVX-512).
TEST(Kernels, EveryQGemmVariantMatchesReferenceExactly) {
  const CpuFeatures f = DetectCpuFeatures();
  int tested = 0;
  if (f.BestIsa() >= CpuIsa::kAvx2) {
    KernelTable t;
    reference::Fill(&t);
    avx2::Fill(&t);
    ASSERT_STREQ(t.qgemm_variant, "avx2");
    ASSERT_STREQ(t.qgemm_row_variant, "avx2");
    ExpectQGemmMatchesReference(t);
    ++tested;
    if (f.avx_vnni) {
      avxvnni::Fill(&t);
      ASSERT_STREQ(t.qgemm_variant, "avxvnni");
      ASSERT_STREQ(t.qgemm_row_variant, "avxvnni");
      ExpectQGemmMatchesReference(t);
      ++tested;
    }
  }
  if (f.BestIsa() >= CpuIsa::kAvx512 && f.avx512vnni) {
    const KernelTable t = MakeKernelTable(CpuIsa::kAvx512);
    ASSERT_STREQ(t.qgemm_variant, "avx512vnni");
    ASSERT_STREQ(t.qgemm_row_variant, "avx512vnni");
    ExpectQGemmMatchesReference(t);
    ++tested;
  }
  if (f.MaxIsa() >= CpuIsa::kAmx) {
    const KernelTable t = MakeKernelTable(CpuIsa::kAmx);
    ASSERT_STREQ(t.qgemm_tile16_variant, "amx-int8");
    ExpectQGemmMatchesReference(t);
    ++tested;
  } else {
    std::printf("[ info ] no AMX-INT8 here (cpu: %s): the tile kernel is not run\n", f.ToString().c_str());
  }
  if (tested == 0) GTEST_SKIP() << "no SIMD quantized-matmul variant on this CPU";
  std::printf("[ info ] %d quantized-matmul variants tested (cpu: %s)\n", tested, f.ToString().c_str());
}

// The ISA's activation quantizer gives the reference's bytes: random data
// at several magnitudes, all-zero blocks, exact halves (ties round to even)
// and subnormals, for k-blocks of 16 and 32, with and without the shift.
TEST_P(KernelIsaTest, QuantizeTokenMatchesReferenceExactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  ASSERT_NE(k.quantize_token, nullptr);
  std::mt19937 rng(21);
  const int64_t n = 256;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<float> x = RandomVec(n, rng);
    const float mag = std::pow(10.0f, static_cast<float>(trial % 9) - 4);
    for (auto& v : x) v *= mag;
    for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                         // a zero block
    for (int i = 0; i < 32; ++i) x[64 + i] = (i == 0 ? 127.0f : -63.5f + static_cast<float>(i));  // ties
    for (int i = 0; i < 32; ++i) x[96 + i] = 1e-40f * static_cast<float>(i - 16);                  // subnormals
    for (int64_t block : {16, 32}) {
      for (int32_t mul : {0, 16}) {
        std::vector<int8_t> q_ref(n), q(n);
        std::vector<int32_t> b_ref(n / block), b(n / block);
        std::vector<float> da_ref(n / block), da(n / block), ds_ref(n / block), ds(n / block);
        QuantizeTokenReference(x.data(), n, block, mul, q_ref.data(), b_ref.data(), da_ref.data(), ds_ref.data());
        k.quantize_token(x.data(), n, block, mul, q.data(), b.data(), da.data(), ds.data());
        ASSERT_EQ(q, q_ref) << "trial " << trial << " block " << block;
        ASSERT_EQ(b, b_ref) << "trial " << trial;
        ASSERT_EQ(std::memcmp(da.data(), da_ref.data(), da.size() * 4), 0) << "trial " << trial;
        ASSERT_EQ(std::memcmp(ds.data(), ds_ref.data(), ds.size() * 4), 0) << "trial " << trial;
      }
    }
    // Per-token (row-scaled formats): one scale over the whole row.
    for (int64_t len : {int64_t{32}, int64_t{96}, n}) {
      std::vector<int8_t> q_ref(len), q(len);
      int32_t b_ref = 0, b = 0;
      float da_ref = 0, da = 0, ds_ref = 0, ds = 0;
      QuantizeTokenRowReference(x.data(), len, q_ref.data(), &b_ref, &da_ref, &ds_ref);
      k.quantize_token_row(x.data(), len, q.data(), &b, &da, &ds);
      ASSERT_EQ(q, q_ref) << "trial " << trial << " row of " << len;
      ASSERT_EQ(b, b_ref) << "trial " << trial;
      ASSERT_EQ(std::memcmp(&da, &da_ref, 4), 0) << "trial " << trial;
      ASSERT_EQ(std::memcmp(&ds, &ds_ref, 4), 0) << "trial " << trial;
    }
  }
}

// Batch invariance: a token's output row is bit-identical whether it is
// computed alone (M = 1) or inside a batch of 64, with 1 or 2 threads, for
// every weight type; and identical across ISAs.
TEST_P(KernelIsaTest, MatmulIsBatchThreadAndIsaInvariant) {
  const KernelTable k = MakeKernelTable(GetParam());
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(11);
  ThreadPool p1(1), p2(2);
  std::vector<DType> types(std::begin(kFloatTypes), std::end(kFloatTypes));
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  for (DType t : types) {
    const bool k256 = GetDTypeInfo(t).block_size == 256;
    const std::vector<int64_t> ins = GetDTypeInfo(t).quantized ? std::vector<int64_t>{k256 ? 256 : 96, k256 ? 512 : 288}
                                                                 : std::vector<int64_t>{64, 100, 257};
    for (int64_t n_in : ins) {
      const int64_t n_out = 75, m = 64;  // 75: a partial last row group
      auto w = RandomWeights(t, n_out, n_in, rng);
      WeightMatrix W{t, n_in, n_out, w.data(), *RowBytes(t, n_in)};
      auto x = RandomVec(m * n_in, rng);
      std::vector<float> y1(m * n_out), y2(m * n_out), y_ref(m * n_out), y_one(n_out);
      Matmul(k, p1, W, x.data(), m, y1.data());
      Matmul(k, p2, W, x.data(), m, y2.data());
      Matmul(ref, p2, W, x.data(), m, y_ref.data());
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << DTypeName(t);
      EXPECT_EQ(std::memcmp(y1.data(), y_ref.data(), y1.size() * 4), 0) << DTypeName(t);
      for (int64_t row : {0L, 17L, 63L}) {
        Matmul(k, p2, W, x.data() + row * n_in, 1, y_one.data());
        EXPECT_EQ(std::memcmp(y_one.data(), y1.data() + row * n_out, n_out * 4), 0)
            << DTypeName(t) << " n_in=" << n_in << " row " << row;
      }
      // Chunked: tokens 0..9 then 10..63 give the same rows.
      std::vector<float> yc(m * n_out);
      Matmul(k, p2, W, x.data(), 10, yc.data());
      Matmul(k, p2, W, x.data() + 10 * n_in, m - 10, yc.data() + 10 * n_out);
      EXPECT_EQ(std::memcmp(yc.data(), y1.data(), yc.size() * 4), 0) << DTypeName(t);
    }
  }
}

// Prefill's expansion of every group of a sparse packing (`table`'s
// expand_sparse24 / expand_sparse_mask) gives the dense packing's quants
// and scales (padding rows aside: zero scales either way).
void ExpectExpansionIsDense(const KernelTable& table, const PackedMatrix& pm, const PackedMatrix& dense) {
  PackedMatrix scratch = PackedMatrix::DenseGroup(pm.DenseType(), pm.n_in());
  for (int64_t g = 0; g < dense.n_groups(); ++g) {
    (pm.format().sparse24 ? table.expand_sparse24 : table.expand_sparse_mask)(pm, g, &scratch);
    const int rows = static_cast<int>(std::min<int64_t>(16, pm.n_out() - 16 * g));
    for (int64_t b = 0; b < pm.n_blocks(); ++b) {
      for (int r = 0; r < rows; ++r) {
        ASSERT_EQ(scratch.Scale(0, b, r), dense.Scale(g, b, r));
        for (int e = 0; e < 32; ++e) {
          ASSERT_EQ(PackedMatrix::Quant(scratch.format(), scratch.Block(0, b), r, e),
                    PackedMatrix::Quant(dense.format(), dense.Block(g, b), r, e))
              << "group " << g << " block " << b << " row " << r << " e " << e;
        }
      }
    }
  }
}

// w · x [m, n_in] on `table` equals `want` [m, n_out] bit for bit, batched and
// token by token.
void ExpectMatmulIs(const KernelTable& table, ThreadPool& pool, const WeightMatrix& w, const std::vector<float>& x,
                    int64_t m, const std::vector<float>& want) {
  std::vector<float> got(m * w.n_out), one(w.n_out);
  Matmul(table, pool, w, x.data(), m, got.data());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "n_in " << w.n_in;
  for (int64_t t = 0; t < m; t += 4) {  // alone equals batched
    Matmul(table, pool, w, x.data() + t * w.n_in, 1, one.data());
    ASSERT_EQ(std::memcmp(one.data(), want.data() + t * w.n_out, w.n_out * 4), 0) << "token " << t;
  }
}

// Q8_0 rows made 2:4 sparse (two, sometimes three, zeros per 4-group): the
// infera Q8_0_S24 blocks hold the same values, and every packing of them
// (dense Q8_0, sparse from Q8_0, sparse and dense from Q8_0_S24) gives the
// reference's dense Q8_0 results bit for bit, alone and in batches, on this
// ISA's qgemm_sparse24.
TEST_P(KernelIsaTest, Sparse24MatchesDenseQ8_0Exactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(24);
  ThreadPool pool(2);
  for (int64_t n_in : {32L, 96L, 288L}) {
    const int64_t n_out = 75, blocks = n_in / 32;
    auto w = RandomWeights(DType::kQ8_0, n_out, n_in, rng);
    EXPECT_FALSE(PackedMatrix::IsSparse24(DType::kQ8_0, w.data(), blocks * 34, n_in, n_out));
    for (int64_t b = 0; b < n_out * blocks; ++b) {
      for (int g = 0; g < 8; ++g) {
        uint8_t* q = w.data() + b * 34 + 2 + 4 * g;
        const int drop = 2 + (rng() % 5 == 0);
        for (int i = 0, dropped = 0; dropped < drop; ++i) {
          const int pos = static_cast<int>(rng() % 4);
          if (q[pos] != 0 || i > 50) {
            q[pos] = 0;
            ++dropped;
          }
        }
      }
    }
    ASSERT_TRUE(PackedMatrix::IsSparse24(DType::kQ8_0, w.data(), blocks * 34, n_in, n_out));
    std::vector<uint8_t> s24(n_out * blocks * kQ8_0S24Bytes);
    for (int64_t b = 0; b < n_out * blocks; ++b) CompressQ8_0Block24(w.data() + b * 34, s24.data() + b * kQ8_0S24Bytes);
    std::vector<float> a(n_in), c(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
      DequantizeRow(DType::kQ8_0, w.data() + r * blocks * 34, a.data(), n_in);
      DequantizeRow(DType::kQ8_0S24, s24.data() + r * blocks * kQ8_0S24Bytes, c.data(), n_in);
      ASSERT_EQ(std::memcmp(a.data(), c.data(), n_in * 4), 0) << "row " << r;
    }
    const size_t rb = blocks * 34, rbs = blocks * kQ8_0S24Bytes;
    const PackedMatrix dense = PackedMatrix::Pack(DType::kQ8_0, w.data(), rb, n_in, n_out);
    const PackedMatrix packs[] = {PackedMatrix::Pack(DType::kQ8_0, w.data(), rb, n_in, n_out, SparseLayout::k24),
                                  PackedMatrix::Pack(DType::kQ8_0S24, s24.data(), rbs, n_in, n_out, SparseLayout::k24),
                                  PackedMatrix::Pack(DType::kQ8_0S24, s24.data(), rbs, n_in, n_out),
                                  PackedMatrix::Pack(DType::kQ8_0, w.data(), rb, n_in, n_out, SparseLayout::kMask)};
    ASSERT_TRUE(packs[0].format().sparse24 && packs[1].format().sparse24 && !packs[2].format().sparse24);
    ASSERT_TRUE(packs[3].format().sparse_mask);
    EXPECT_LT(packs[0].bytes() * 10, dense.bytes() * 7);  // 5.5 vs 8.5 bits per weight
    const int64_t m = 9;
    auto x = RandomVec(m * n_in, rng);
    std::vector<float> want(m * n_out);
    WeightMatrix wd{DType::kQ8_0, n_in, n_out, w.data(), rb, &dense};
    Matmul(ref, pool, wd, x.data(), m, want.data());
    for (const PackedMatrix* pm : {&packs[0], &packs[1], &packs[3]}) {
      for (const KernelTable* table : {&k, &ref}) ExpectExpansionIsDense(*table, *pm, dense);
    }
    for (const PackedMatrix& pm : packs) {
      const bool from_s24 = pm.type() == DType::kQ8_0S24;
      const WeightMatrix ws{pm.type(), n_in, n_out, from_s24 ? s24.data() : w.data(), from_s24 ? rbs : rb, &pm};
      for (const KernelTable* table : {&k, &ref}) ExpectMatmulIs(*table, pool, ws, x, m, want);
    }
  }
}

// 2:4 sparse Q4_0 rows (each 4-group at most two values u != 8) and their
// infera Q4_0_S24 blocks hold the same values, and every packing of them
// (dense Q4_0, sparse from Q4_0 and from Q4_0_S24, dense from Q4_0_S24) gives
// the reference's dense Q4_0 results bit for bit, alone and in batches, on
// this ISA's qgemm_sparse24; prefill's expansion gives the dense packing.
TEST_P(KernelIsaTest, Sparse24MatchesDenseQ4_0Exactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(26);
  ThreadPool pool(2);
  auto u_at = [](const uint8_t* blk, int j) { return j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4); };
  auto set_u = [](uint8_t* blk, int j, int u) {
    uint8_t& byte = blk[2 + j % 16];
    byte = static_cast<uint8_t>(j < 16 ? (byte & 0xF0) | u : (byte & 0x0F) | u << 4);
  };
  // Compressing a dense block keeps each group's two largest |u - 8| (ties:
  // the lower position) and zeroes the rest.
  {
    uint8_t blk[18] = {0x00, 0x3C}, s24[kQ4_0S24Bytes], back[18];
    const int us[32] = {8, 15, 0, 9, 8, 8, 8, 8, 1, 2, 3, 4, 7, 9, 7, 9, 8, 8, 8, 3, 0, 0, 0, 0, 8, 8, 14, 8, 5, 11, 5, 8};
    for (int j = 0; j < 32; ++j) set_u(blk, j, us[j]);
    EXPECT_FALSE(Q4_0BlockIs24(blk));
    CompressQ4_0Block24(blk, s24);
    ExpandQ4_0S24Block(s24, back);
    const int want[32] = {8, 15, 0, 8, 8, 8, 8, 8, 1, 2, 8, 8, 7, 9, 8, 8, 8, 8, 8, 3, 0, 0, 8, 8, 8, 8, 14, 8, 5, 11, 8, 8};
    for (int j = 0; j < 32; ++j) EXPECT_EQ(u_at(back, j), want[j]) << j;
    EXPECT_TRUE(Q4_0BlockIs24(back));
    EXPECT_EQ(std::memcmp(back, blk, 2), 0);
  }
  for (int64_t n_in : {32L, 96L, 288L}) {
    const int64_t n_out = 75, blocks = n_in / 32;
    auto w = RandomWeights(DType::kQ4_0, n_out, n_in, rng);
    for (int64_t b = 0; b < n_out * blocks; ++b) {
      uint8_t* blk = w.data() + b * 18;
      for (int g = 0; g < 8; ++g) {
        const int drop = 2 + (rng() % 5 == 0);
        for (int i = 0, dropped = 0; dropped < drop; ++i) {
          const int pos = 4 * g + static_cast<int>(rng() % 4);
          if (u_at(blk, pos) != 8 || i > 50) {
            set_u(blk, pos, 8);
            ++dropped;
          }
        }
      }
    }
    ASSERT_TRUE(PackedMatrix::IsSparse24(DType::kQ4_0, w.data(), blocks * 18, n_in, n_out));
    std::vector<uint8_t> s24(n_out * blocks * kQ4_0S24Bytes);
    for (int64_t b = 0; b < n_out * blocks; ++b) CompressQ4_0Block24(w.data() + b * 18, s24.data() + b * kQ4_0S24Bytes);
    std::vector<float> a(n_in), c(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
      DequantizeRow(DType::kQ4_0, w.data() + r * blocks * 18, a.data(), n_in);
      DequantizeRow(DType::kQ4_0S24, s24.data() + r * blocks * kQ4_0S24Bytes, c.data(), n_in);
      ASSERT_EQ(std::memcmp(a.data(), c.data(), n_in * 4), 0) << "row " << r;
    }
    const size_t rb = blocks * 18, rbs = blocks * kQ4_0S24Bytes;
    const PackedMatrix dense = PackedMatrix::Pack(DType::kQ4_0, w.data(), rb, n_in, n_out);
    const PackedMatrix packs[] = {PackedMatrix::Pack(DType::kQ4_0, w.data(), rb, n_in, n_out, SparseLayout::k24),
                                  PackedMatrix::Pack(DType::kQ4_0S24, s24.data(), rbs, n_in, n_out, SparseLayout::k24),
                                  PackedMatrix::Pack(DType::kQ4_0S24, s24.data(), rbs, n_in, n_out)};
    ASSERT_TRUE(packs[0].format().sparse24 && packs[1].format().sparse24 && !packs[2].format().sparse24);
    EXPECT_EQ(packs[0].DenseType(), DType::kQ4_0);
    // 3.5 vs 4.5 bits per weight: the file's 14 bytes per 32 weights (in
    // units of two k-blocks).
    EXPECT_EQ(packs[0].bytes() * 9, dense.bytes() * 7);
    EXPECT_EQ(packs[0].bytes(), static_cast<size_t>(packs[0].n_groups()) * 16 * (blocks + blocks % 2) * kQ4_0S24Bytes);
    const int64_t m = 9;
    auto x = RandomVec(m * n_in, rng);
    std::vector<float> want(m * n_out);
    WeightMatrix wd{DType::kQ4_0, n_in, n_out, w.data(), rb, &dense};
    Matmul(ref, pool, wd, x.data(), m, want.data());
    for (const PackedMatrix* pm : {&packs[0], &packs[1]}) {
      for (const KernelTable* table : {&k, &ref}) ExpectExpansionIsDense(*table, *pm, dense);
    }
    for (const PackedMatrix& pm : packs) {
      const bool from_s24 = pm.type() == DType::kQ4_0S24;
      const WeightMatrix ws{pm.type(), n_in, n_out, from_s24 ? s24.data() : w.data(), from_s24 ? rbs : rb, &pm};
      for (const KernelTable* table : {&k, &ref}) ExpectMatmulIs(*table, pool, ws, x, m, want);
    }
  }
}

// Q8_0 matrices with any fraction of zero quants (none, 30 %, 70 %, 95 %,
// all; 4:8 groups): the sparse-mask layout gives the reference's dense Q8_0
// results bit for bit on this ISA, alone and batched, and is smaller than
// the dense layout once zeros dominate.
TEST_P(KernelIsaTest, SparseMaskMatchesDenseQ8_0Exactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::mt19937 rng(25);
  ThreadPool pool(2);
  for (double zeros : {0.0, 0.3, 0.7, 0.95, 1.0, -1.0}) {  // -1: 4:8
    for (int64_t n_in : {32L, 288L}) {
      const int64_t n_out = 75, blocks = n_in / 32;
      auto w = RandomWeights(DType::kQ8_0, n_out, n_in, rng);
      std::uniform_real_distribution<double> u(0, 1);
      for (int64_t b = 0; b < n_out * blocks; ++b) {
        uint8_t* q = w.data() + b * 34 + 2;
        for (int j = 0; j < 32; ++j) {
          if (zeros >= 0 && u(rng) < zeros) q[j] = 0;
        }
        for (int g = 0; zeros < 0 && g < 4; ++g) {  // at most 4 of every 8 nonzero
          auto nonzero = [&] { return 8 - static_cast<int>(std::count(q + 8 * g, q + 8 * g + 8, uint8_t{0})); };
          while (nonzero() > 4) q[8 * g + rng() % 8] = 0;
        }
      }
      const size_t rb = blocks * 34;
      const PackedMatrix dense = PackedMatrix::Pack(DType::kQ8_0, w.data(), rb, n_in, n_out);
      const PackedMatrix mask = PackedMatrix::Pack(DType::kQ8_0, w.data(), rb, n_in, n_out, SparseLayout::kMask);
      ASSERT_TRUE(mask.format().sparse_mask);
      if (zeros >= 0.7) {
        EXPECT_LT(mask.bytes(), dense.bytes() / 2) << zeros;
      }
      const int64_t m = 9;
      auto x = RandomVec(m * n_in, rng);
      std::vector<float> want(m * n_out), got(m * n_out), one(n_out);
      WeightMatrix wd{DType::kQ8_0, n_in, n_out, w.data(), rb, &dense};
      WeightMatrix wm{DType::kQ8_0, n_in, n_out, w.data(), rb, &mask};
      Matmul(ref, pool, wd, x.data(), m, want.data());
      // 4:8: the infera Q8_0_S48 blocks hold the same values; packed by
      // masks and dense they run as the Q8_0 matrix does.
      std::vector<uint8_t> s48;
      std::vector<PackedMatrix> s48_packs;
      const size_t rbs = blocks * kQ8_0S48Bytes;
      if (zeros < 0) {
        s48.resize(n_out * rbs);
        for (int64_t b = 0; b < n_out * blocks; ++b) {
          ASSERT_TRUE(Q8_0BlockIs48(w.data() + b * 34));
          CompressQ8_0Block48(w.data() + b * 34, s48.data() + b * kQ8_0S48Bytes);
        }
        std::vector<float> a(n_in), c(n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          DequantizeRow(DType::kQ8_0, w.data() + r * rb, a.data(), n_in);
          DequantizeRow(DType::kQ8_0S48, s48.data() + r * rbs, c.data(), n_in);
          ASSERT_EQ(std::memcmp(a.data(), c.data(), n_in * 4), 0) << "row " << r;
        }
        EXPECT_DOUBLE_EQ(PackedMatrix::ZeroFraction(DType::kQ8_0S48, s48.data(), rbs, n_in, n_out),
                         PackedMatrix::ZeroFraction(DType::kQ8_0, w.data(), rb, n_in, n_out));
        s48_packs.push_back(PackedMatrix::Pack(DType::kQ8_0S48, s48.data(), rbs, n_in, n_out, SparseLayout::kMask));
        s48_packs.push_back(PackedMatrix::Pack(DType::kQ8_0S48, s48.data(), rbs, n_in, n_out));
        ASSERT_TRUE(s48_packs[0].format().sparse_mask && !s48_packs[1].format().sparse_mask);
      }
      std::vector<WeightMatrix> runs = {wm};
      for (const PackedMatrix& pm : s48_packs) runs.push_back({DType::kQ8_0S48, n_in, n_out, s48.data(), rbs, &pm});
      for (const WeightMatrix& wr : runs) {
        for (const KernelTable* table : {&k, &ref}) {
          Matmul(*table, pool, wr, x.data(), m, got.data());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "zeros " << zeros << " n_in " << n_in;
          for (int64_t t : {0L, 5L, 8L}) {
            Matmul(*table, pool, wr, x.data() + t * n_in, 1, one.data());
            ASSERT_EQ(std::memcmp(one.data(), want.data() + t * n_out, n_out * 4), 0) << "token " << t;
          }
        }
      }
    }
  }
}

// Q8_0_S48 blocks: a dense Q8_0 block keeps the four largest |q| of each
// 8-group (ties: the lower position); a damaged mask (more than four bits)
// keeps its four lowest positions, an empty one none.
TEST(Q8_0S48, CompressKeepsTheLargestAndExpandToleratesDamage) {
  uint8_t q8[34] = {0x00, 0x3C};  // d = 1
  const int8_t vals[32] = {5, -9, 1, 9, 0, 2, -3, 7,   1, 1, 1, 1, 1, 1, 1, 1,
                           0, 0, 0, 0, 0, 0, 0, -128,  127, -127, 0, 4, 0, 0, 0, 3};
  std::memcpy(q8 + 2, vals, 32);
  EXPECT_FALSE(Q8_0BlockIs48(q8));
  uint8_t s48[kQ8_0S48Bytes], back[34];
  CompressQ8_0Block48(q8, s48);
  EXPECT_EQ(s48[2], 0b10001011);  // |-9|, |9|, |7|, |5|
  EXPECT_EQ(s48[3], 0b00001111);  // ties: the lowest four positions
  EXPECT_EQ(s48[4], 0b10000111);  // -128 and the three lowest zeros
  EXPECT_EQ(s48[5], 0b10001011);
  ExpandQ8_0S48Block(s48, back);
  const int8_t want[32] = {5, -9, 0, 9, 0, 0, 0, 7,   1, 1, 1, 1, 0, 0, 0, 0,
                           0, 0, 0, 0, 0, 0, 0, -128,  127, -127, 0, 4, 0, 0, 0, 3};
  EXPECT_EQ(std::memcmp(back + 2, want, 32), 0);
  EXPECT_TRUE(Q8_0BlockIs48(back));
  s48[2] = 0xFF;
  s48[3] = 0x00;
  ExpandQ8_0S48Block(s48, back);
  const int8_t damaged[16] = {5, -9, 9, 7, 0, 0, 0, 0,   0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(back + 2, damaged, 16), 0);
}

// One op over several matrices with one input (Q/K/V, gate/up) gives each
// output exactly as its own Matmul does, whatever the mix of types (shared
// and separate activation quantizations, float and packed parts), for
// decode and prefill, on 1 and 2 threads.
TEST_P(KernelIsaTest, MatmulManyEqualsMatmulPerMatrix) {
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(12);
  ThreadPool p1(1), p2(2);
  const int64_t n_in = 512;
  const DType mixes[][3] = {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                            {DType::kQ4_0, DType::kF16, DType::kQ8_0},
                            {DType::kF32, DType::kBF16, DType::kQ5_K}};
  for (const auto& mix : mixes) {
    const int64_t n_outs[3] = {80, 33, 47};
    std::vector<std::vector<uint8_t>> ws;
    std::vector<WeightMatrix> W;
    for (int i = 0; i < 3; ++i) ws.push_back(RandomWeights(mix[i], n_outs[i], n_in, rng));
    for (int i = 0; i < 3; ++i) W.push_back({mix[i], n_in, n_outs[i], ws[i].data(), *RowBytes(mix[i], n_in)});
    for (int64_t m : {1, 13}) {
      auto x = RandomVec(m * n_in, rng);
      for (ThreadPool* pool : {&p1, &p2}) {
        std::vector<float> ys[3], yr[3];
        MatmulTarget targets[3];
        for (int i = 0; i < 3; ++i) {
          ys[i].assign(m * n_outs[i], -1.0f);
          yr[i].resize(m * n_outs[i]);
          targets[i] = {&W[i], ys[i].data()};
          Matmul(k, *pool, W[i], x.data(), m, yr[i].data());
        }
        MatmulMany(k, *pool, targets, 3, x.data(), m);
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(std::memcmp(ys[i].data(), yr[i].data(), ys[i].size() * 4), 0)
              << DTypeName(mix[i]) << " part " << i << " m=" << m;
        }
      }
    }
  }
}

// W8A8 with LLM.int8()-style outlier columns: the int8 product of x with
// those columns zeroed plus the F16 side product, bit for bit, alone and
// batched, MatmulMany as Matmul; and close to the exact product.
TEST_P(KernelIsaTest, W8A8OutlierColumnsAddTheFloatSideProduct) {
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(31);
  ThreadPool pool(2);
  const int64_t n_in = 96, n_out = 40, m = 9;
  auto w = RandomWeights(DType::kW8A8, n_out, n_in, rng);
  const std::vector<int32_t> cols = {3, 50, 95};
  const int64_t kc = static_cast<int64_t>(cols.size());
  auto dense = RandomWeights(DType::kF16, n_out, kc, rng);
  OutlierColumns o{cols, WeightMatrix{DType::kF16, kc, n_out, dense.data(), static_cast<size_t>(kc) * 2}};
  WeightMatrix plain{DType::kW8A8, n_in, n_out, w.data(), *RowBytes(DType::kW8A8, n_in)};
  WeightMatrix with = plain;
  with.outliers = &o;
  auto x = RandomVec(m * n_in, rng);
  for (int64_t t = 0; t < m; ++t) x[t * n_in + 50] *= 100.0f;  // an outlier channel
  std::vector<float> y(m * n_out), want(m * n_out), side(m * n_out), xm = x, xs(m * kc);
  Matmul(k, pool, with, x.data(), m, y.data());
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < kc; ++j) {
      xs[t * kc + j] = x[t * n_in + cols[j]];
      xm[t * n_in + cols[j]] = 0.0f;
    }
  }
  Matmul(k, pool, plain, xm.data(), m, want.data());
  Matmul(k, pool, o.dense, xs.data(), m, side.data());
  for (int64_t i = 0; i < m * n_out; ++i) want[i] += side[i];
  ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0);
  std::vector<float> y_one(n_out), y_many(m * n_out), y_other(m * n_out);
  Matmul(k, pool, with, x.data() + 5 * n_in, 1, y_one.data());
  EXPECT_EQ(std::memcmp(y_one.data(), y.data() + 5 * n_out, n_out * 4), 0);
  const MatmulTarget targets[2] = {{&plain, y_other.data()}, {&with, y_many.data()}};
  MatmulMany(k, pool, targets, 2, x.data(), m);
  EXPECT_EQ(std::memcmp(y_many.data(), y.data(), y.size() * 4), 0);
  // Against the exact product (int8 part dequantized, outlier columns from
  // the dense weights): only the int8 rounding of the ordinary channels.
  std::vector<float> deq(n_in), dd(kc);
  for (int64_t r = 0; r < n_out; ++r) {
    DequantizeRow(DType::kW8A8, w.data() + r * plain.row_bytes, deq.data(), n_in);
    DequantizeRow(DType::kF16, dense.data() + r * kc * 2, dd.data(), kc);
    for (int64_t j = 0; j < kc; ++j) deq[cols[j]] = dd[j];
    for (int64_t t = 0; t < m; ++t) {
      double exact = 0, mag = 0;
      for (int64_t e = 0; e < n_in; ++e) {
        exact += static_cast<double>(deq[e]) * x[t * n_in + e];
        mag += std::fabs(static_cast<double>(deq[e]) * xm[t * n_in + e]);
      }
      EXPECT_NEAR(y[t * n_out + r], exact, 0.02 * mag + 1e-4) << "row " << r << " token " << t;
    }
  }
}

// silu_mul and gelu_tanh_mul: the same bits as the portable SiluMul /
// GeluTanhMul on every ISA (vectorized or not, any length: vector bodies and
// scalar tails), including the ends of exp's range, infinities and NaN;
// within 2e-6 (SiLU) and 2e-5 (GELU's far negative tail) of double formulas.
TEST_P(KernelIsaTest, GatedActivationsMatchReferenceBitExactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 4);
  struct Act {
    const char* name;
    void (*reference)(float*, const float*, int64_t);
    void (*isa)(float*, const float*, int64_t);
    double (*exact)(double);  // the activation in double, with libm
    double rel_tol;
  };
  const Act acts[] = {
      {"silu", SiluMul, k.silu_mul, [](double x) { return x / (1.0 + std::exp(-x)); }, 2e-6},
      {"gelu_tanh", GeluTanhMul, k.gelu_tanh_mul,
       // 0.5 x (1 + tanh(z)) written as x / (1 + exp(-2z)): in double,
       // 1 + tanh(z) cancels for x below about -5.
       // The tail's relative error grows with exp's argument (-2z reaches 88 at
       // x = -10; its float rounding alone is |2z| * 6e-8).
       [](double x) { return x / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x))); },
       2e-5},
  };
  for (const Act& act : acts) {
    ASSERT_NE(act.isa, nullptr) << act.name;
    for (int64_t n : {1, 7, 16, 37, 1000}) {
      std::vector<float> g(n), u(n);
      for (auto& x : g) x = d(rng);
      for (auto& x : u) x = d(rng);
      const float edge[] = {0.0f, -0.0f, 87.5f, -87.5f, 88.0f, -88.0f, 88.5f, -88.5f, 100.0f, -100.0f,
                            INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 5.0f, -5.0f, 9.0f, -9.0f};
      for (size_t i = 0; i < std::size(edge) && i < size_t(n); ++i) g[i] = edge[i];
      std::vector<float> want = g, got = g;
      act.reference(want.data(), u.data(), n);
      act.isa(got.data(), u.data(), n);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), n * 4), 0) << act.name << " n " << n;
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(g[i])) continue;
        const double exact = act.exact(g[i]) * u[i];
        EXPECT_NEAR(got[i], exact, act.rel_tol * std::fabs(exact) + 1e-30) << act.name << " g " << g[i];
      }
    }
  }
}

// soft_cap (Gemma 2's final logits): the same bits as the portable
// SoftCapInPlace on every ISA, within 1e-6 of cap * tanh(x / cap) in double.
TEST_P(KernelIsaTest, SoftCapMatchesReferenceBitExactly) {
  const KernelTable k = MakeKernelTable(GetParam());
  ASSERT_NE(k.soft_cap, nullptr);
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0, 40);
  for (int64_t n : {1, 7, 16, 37, 1000}) {
    std::vector<float> x(n);
    for (auto& v : x) v = d(rng);
    const float edge[] = {0.0f, -0.0f, 1e-3f, -1e-3f, 8.9f, -9.1f, 1000.0f, -1000.0f, INFINITY, -INFINITY};
    for (size_t i = 0; i < std::size(edge) && i < size_t(n); ++i) x[i] = edge[i];
    std::vector<float> want = x, got = x;
    SoftCapInPlace(want.data(), n, 30.0f);
    k.soft_cap(got.data(), n, 30.0f);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), n * 4), 0) << "n " << n;
    for (int64_t i = 0; i < n; ++i) {
      const double exact = 30.0 * std::tanh(double(x[i]) / 30.0);
      EXPECT_NEAR(got[i], exact, 1e-6 * std::fabs(exact) + 1e-30) << "x " << x[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelIsaTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

TEST(Kernels, QuantizeActsRoundTrips) {
  std::mt19937 rng(1);
  auto x = RandomVec(96, rng);
  x[5] = 0;
  std::vector<uint8_t> buf;
  for (DType t : {DType::kQ4_0, DType::kQ6_K, DType::kQ4_K}) {
    const PackFormat f = GetPackFormat(t);
    const QuantActs a = QuantizeActs(x.data(), 1, 96, 96, f, &buf);
    ASSERT_EQ(a.nb(), 96 / f.block);
    for (int i = 0; i < 96; ++i) EXPECT_NEAR(a.Q(0)[i] * a.Da(0)[i / f.block], x[i], a.Da(0)[i / f.block] * 0.5f + 1e-7f);
    for (int b = 0; b < a.nb(); ++b) {
      int sum = 0;
      for (int i = 0; i < f.block; ++i) sum += a.Q(0)[b * f.block + i];
      EXPECT_EQ(a.Bias(0)[b], f.shift >= 0 ? -sum * (1 << f.shift) : 0);
      EXPECT_EQ(a.Dsum(0)[b], a.Da(0)[b] * static_cast<float>(sum));
    }
  }
  std::vector<float> zeros(32, 0.0f);
  const QuantActs z = QuantizeActs(zeros.data(), 1, 32, 32, GetPackFormat(DType::kQ8_0), &buf);
  EXPECT_EQ(z.Da(0)[0], 0.0f);
  EXPECT_EQ(z.Q(0)[3], 0);
}

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

// The defined tanh (attention soft-capping) against libm's in double: within
// 1e-6 relative over both of its pieces and the switch at |y| = 0.3; exact
// at 0, the infinities and far out; NaN stays NaN.
TEST(Kernels, TanhDefinedIsCloseToLibm) {
  double worst = 0;
  for (float y = -12.0f; y <= 12.0f; y += 0.00137f) {
    const double want = std::tanh(double(y));
    worst = std::max(worst, std::fabs(TanhDefined(y) - want) / std::max(std::fabs(want), 1e-30));
  }
  for (float y : {0.29999998f, 0.3f, 0.30000001f, 1e-6f, 1e-20f}) {
    for (float v : {y, -y}) {
      const double want = std::tanh(double(v));
      worst = std::max(worst, std::fabs(TanhDefined(v) - want) / std::fabs(want));
    }
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(TanhDefined(0.0f), 0.0f);
  EXPECT_EQ(TanhDefined(INFINITY), 1.0f);
  EXPECT_EQ(TanhDefined(-INFINITY), -1.0f);
  EXPECT_EQ(TanhDefined(50.0f), 1.0f);
  EXPECT_EQ(TanhDefined(-50.0f), -1.0f);
  EXPECT_TRUE(std::isnan(TanhDefined(NAN)));
}

}  // namespace
}  // namespace infera::kernels_test
