// The tiled attention kernel (KernelTable::flash_chunk driven by
// kernels/flash.h) on every ISA: close to the naive reference and to a
// double-precision softmax, bit-identical to the scalar definition, and the
// same bits for a token whether it runs alone, in a block of tokens, or with
// its chunks of positions split over threads (AttendBatch).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "attention/attention.h"
#include "kernels/bf16_generic.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/flash.h"
#include "kernels/flash_generic.h"
#include "kernels/kernels.h"
#include "unit/test_util.h"

namespace infera::flash_test {
namespace {

using testing::AvailableIsas;
using testing::RandomVec;

// Which of a Cache's layouts a block reads (true / false also work: int8 or
// f32).
constexpr int kF32Cache = 0, kQ8Cache = 1, kBf16Cache = 2;

// A cache of one KV head with n_slots slots: row-major f32 K and V
// ([slot][head_dim], what the naive reference reads) and the tiled kernel's
// layout of the same values (FlashKIndex), f32 and quantized to int8.
struct Cache {
  int hd = 0;
  std::vector<float> k, v, kt, ks, vs;
  std::vector<int8_t> k8t, v8;
  std::vector<uint16_t> k16, v16;  // bf16 cache layouts (FlashK16Index / FlashV16Index)
  Cache(int64_t n_slots, int head_dim, std::mt19937& rng) : hd(head_dim) {
    const int64_t padded = (n_slots + kFlashTile - 1) / kFlashTile * kFlashTile;
    k = RandomVec(n_slots * hd, rng);
    v = RandomVec(n_slots * hd, rng);
    kt.assign(padded * hd, 0.0f);
    k8t.assign(padded * hd, 0);
    v8.assign(padded * hd, 0);
    ks.assign(padded, 0.0f);
    vs.assign(padded, 0.0f);
    k16.assign(padded * FlashHead16Elems(hd), 0);
    v16.assign(k16.size(), 0);
    for (int64_t s = 0; s < n_slots; ++s) {
      for (int d = 0; d < hd; ++d) {
        k16[FlashK16Index(s, d, hd)] = Bf16Round(k[s * hd + d]);
        v16[FlashV16Index(s, d, hd)] = Bf16Round(v[s * hd + d]);
      }
      for (int d = 0; d < hd; ++d) kt[FlashKIndex(s, d, hd)] = k[s * hd + d];
      ks[s] = QuantizeKvRowTo(k.data() + s * hd, hd, [&](int d, int8_t q) { k8t[FlashKIndex(s, d, hd)] = q; });
      vs[s] = QuantizeKvRow(v.data() + s * hd, hd, v8.data() + s * hd);
    }
  }
  FlashBlock Block(int cache) const {
    FlashBlock b;
    if (cache == kBf16Cache) {
      b.k16 = k16.data();
      b.v16 = v16.data();
    } else if (cache == kQ8Cache) {
      b.k8 = k8t.data();
      b.v8 = v8.data();
      b.ks = ks.data();
      b.vs = vs.data();
    } else {
      b.k = kt.data();
      b.v = v.data();
    }
    return b;
  }
};

// Slots of a sequence of n positions in blocks of `block` slots scattered
// over the pool.
std::vector<int32_t> PagedSlots(int32_t n, int block, std::mt19937& rng) {
  const int32_t n_blocks = (n + block - 1) / block;
  std::vector<int32_t> order(n_blocks), slots(size_t(n_blocks) * block);
  for (int32_t i = 0; i < n_blocks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int32_t p = 0; p < n_blocks * block; ++p) slots[p] = order[p / block] * block + p % block;
  return slots;
}

// out [nq, g, head_dim] for tokens at positions p0 .. p0 + nq - 1 seeing
// [max(0, p - window + 1), p] (window 0: from 0).
std::vector<float> Attend(const KernelTable& k, const Cache& c, int cache, const float* q, int nq, int g, int hd,
                          int32_t p0, int32_t window, const std::vector<int32_t>& slots, float scale, float cap) {
  std::vector<int32_t> first(nq), last(nq);
  for (int i = 0; i < nq; ++i) {
    last[i] = p0 + i;
    first[i] = window > 0 ? std::max(0, last[i] - window + 1) : 0;
  }
  FlashBlock b = c.Block(cache);
  b.q = q;
  b.q_stride = int64_t(g) * hd;
  b.nq = nq;
  b.g = g;
  b.head_dim = hd;
  b.first = first.data();
  b.last = last.data();
  b.slots = slots.data();
  b.scale = scale;
  b.softcap = cap;
  std::vector<float> out(size_t(nq) * g * hd), scratch(FlashBlockScratchFloats(b.rows(), hd));
  FlashAttendBlock(k, b, out.data(), b.q_stride, scratch.data());
  return out;
}

class FlashIsaTest : public ::testing::TestWithParam<CpuIsa> {};

// Gemma 2's soft-capped scores: the naive and tiled kernels against a
// double-precision softmax of cap * tanh(q·k * scale / cap), and the cap must
// change the result (scores large enough to be clipped).
TEST_P(FlashIsaTest, SoftCappedAttentionMatchesDirectComputation) {
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(23);
  const int head_dim = 32, g = 2, n = 70;
  const float scale = 0.5f, cap = 2.0f;
  const Cache c(n, head_dim, rng);
  auto q = RandomVec(int64_t(g) * head_dim, rng, 3.0f);
  std::vector<int32_t> slots(n);
  for (int i = 0; i < n; ++i) slots[i] = (i * 29) % n;
  const int32_t window = 66, last = n - 1, first = last - window + 1;
  const auto flash = Attend(k, c, false, q.data(), 1, g, head_dim, last, window, slots, scale, cap);
  const auto uncapped = Attend(k, c, false, q.data(), 1, g, head_dim, last, window, slots, scale, 0.0f);
  std::vector<float> scores(n), naive(g * head_dim);
  double worst = 0, diff_uncapped = 0;
  for (int h = 0; h < g; ++h) {
    k.attend_head(q.data() + h * head_dim, c.k.data(), c.v.data(), head_dim, head_dim, scale, cap, slots.data(), first,
                  last, scores.data(), naive.data() + h * head_dim);
    std::vector<double> s(n, 0.0), out(head_dim, 0.0);
    double mx = -1e300, sum = 0;
    for (int p = first; p <= last; ++p) {
      double dot = 0;
      for (int d = 0; d < head_dim; ++d) dot += double(q[h * head_dim + d]) * c.k[size_t(slots[p]) * head_dim + d];
      s[p] = cap * std::tanh(dot * scale / cap);
      mx = std::max(mx, s[p]);
    }
    for (int p = first; p <= last; ++p) sum += (s[p] = std::exp(s[p] - mx));
    for (int p = first; p <= last; ++p) {
      for (int d = 0; d < head_dim; ++d) out[d] += s[p] / sum * c.v[size_t(slots[p]) * head_dim + d];
    }
    for (int d = 0; d < head_dim; ++d) {
      const int i = h * head_dim + d;
      worst = std::max({worst, std::fabs(out[d] - naive[i]), std::fabs(out[d] - flash[i])});
      diff_uncapped = std::max(diff_uncapped, std::fabs(out[d] - uncapped[i]));
    }
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(diff_uncapped, 1e-2);
}

// One decode token against the naive reference (one full score row per
// head): relative error < 1e-5 over lengths 1..4096 (tile and chunk
// boundaries included), GQA ratios 1/2/4/8, paged layouts with blocks of
// 8/16/32 slots in shuffled order, a window that does not start at 0; the
// int8 cache within 2e-2; and bit-identical to the scalar definition.
TEST_P(FlashIsaTest, DecodeTokenMatchesNaive) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(17);
  const int hd = 64;
  for (int block : {8, 16, 32}) {
    for (int g : {1, 2, 4, 8}) {
      for (int32_t len : {1, 2, 15, 16, 17, 100, 256, 257, 1000, 4096}) {
        if (GetParam() == CpuIsa::kScalar && len > 1000) continue;  // slow oracle; covered by the other ISAs
        const auto slots = PagedSlots(len, block, rng);
        const Cache c(int64_t(slots.size()), hd, rng);
        const auto q = RandomVec(int64_t(g) * hd, rng, 0.5f);
        const int32_t window = len > 40 ? len - 7 : 0;
        const int32_t first = window > 0 ? len - window : 0;
        std::vector<float> scores(len), naive(g * hd);
        for (int h = 0; h < g; ++h) {
          ref.attend_head(q.data() + h * hd, c.k.data(), c.v.data(), hd, hd, 0.125f, 0.0f, slots.data(), first,
                          len - 1, scores.data(), naive.data() + h * hd);
        }
        const auto flash = Attend(k, c, false, q.data(), 1, g, hd, len - 1, window, slots, 0.125f, 0.0f);
        const auto flash8 = Attend(k, c, true, q.data(), 1, g, hd, len - 1, window, slots, 0.125f, 0.0f);
        double err = 0, err8 = 0, norm = 0;
        for (int i = 0; i < g * hd; ++i) {
          err = std::max(err, std::fabs(double(flash[i]) - naive[i]));
          err8 = std::max(err8, std::fabs(double(flash8[i]) - naive[i]));
          norm = std::max(norm, std::fabs(double(naive[i])));
        }
        EXPECT_LT(err / std::max(norm, 1e-30), 1e-5) << "len " << len << " g " << g << " block " << block;
        EXPECT_LT(err8 / std::max(norm, 1e-30), 2e-2) << "q8 len " << len << " g " << g;
        if (len <= 1000 && GetParam() != CpuIsa::kScalar) {
          const auto r = Attend(ref, c, false, q.data(), 1, g, hd, len - 1, window, slots, 0.125f, 0.0f);
          const auto r8 = Attend(ref, c, true, q.data(), 1, g, hd, len - 1, window, slots, 0.125f, 0.0f);
          EXPECT_EQ(std::memcmp(flash.data(), r.data(), flash.size() * 4), 0) << "len " << len;
          EXPECT_EQ(std::memcmp(flash8.data(), r8.data(), flash8.size() * 4), 0) << "q8 len " << len;
        }
      }
    }
  }
}

// A block of consecutive tokens (prefill) gives every token exactly the
// bits it gets alone (decode), on every ISA and equal to the scalar
// definition: head sizes with and without a 16-lane tail (and an 8-lane
// one), blocks starting on and off tile and chunk boundaries, windows,
// soft-capping, int8 cache.
TEST_P(FlashIsaTest, BlockOfTokensEqualsEachTokenAlone) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(29);
  struct Case {
    int hd, g, nq;
    int32_t p0, window;
    float cap;
    bool q8;
  };
  const Case cases[] = {
      {64, 3, 10, 0, 0, 0, false},       {64, 3, 10, 250, 0, 0, false},  {64, 1, 32, 7, 0, 0, false},
      {80, 4, 8, 500, 0, 0, false},      {128, 2, 16, 37, 20, 0, false}, {64, 8, 4, 300, 0, 0, true},
      {100, 3, 9, 511, 0, 30.0f, false}, {64, 3, 11, 40, 13, 0, true},   {256, 1, 5, 900, 0, 0, false},
      {64, 2, 12, 70, 0, 3.0f, false},   {32, 2, 6, 30, 0, 2.0f, true},  {96, 1, 7, 130, 50, 0, false},
      {40, 2, 5, 20, 0, 0, true},        {100, 3, 9, 200, 0, 0, true},   {128, 1, 6, 80, 0, 0, true},
      {42, 2, 5, 60, 0, 0, true},  // int8 query blocks of 32 + 4 / 32 + 10 dims; 42: not a multiple of 4
  };
  for (const Case& cs : cases) {
    const int32_t n = cs.p0 + cs.nq;
    const auto slots = PagedSlots(n, 16, rng);
    const Cache c(int64_t(slots.size()), cs.hd, rng);
    const auto q = RandomVec(int64_t(cs.nq) * cs.g * cs.hd, rng, 0.7f);
    const auto block = Attend(k, c, cs.q8, q.data(), cs.nq, cs.g, cs.hd, cs.p0, cs.window, slots, 0.1f, cs.cap);
    const auto block_ref = Attend(ref, c, cs.q8, q.data(), cs.nq, cs.g, cs.hd, cs.p0, cs.window, slots, 0.1f, cs.cap);
    EXPECT_EQ(std::memcmp(block.data(), block_ref.data(), block.size() * 4), 0) << "hd " << cs.hd << " p0 " << cs.p0;
    const size_t row = size_t(cs.g) * cs.hd;
    for (int i = 0; i < cs.nq; ++i) {
      const auto alone = Attend(k, c, cs.q8, q.data() + i * row, 1, cs.g, cs.hd, cs.p0 + i, cs.window, slots, 0.1f,
                                cs.cap);
      EXPECT_EQ(std::memcmp(alone.data(), block.data() + i * row, row * 4), 0)
          << "token " << i << " hd " << cs.hd << " p0 " << cs.p0 << " window " << cs.window;
    }
  }
}

// An int8 cache's query is quantized in blocks of 32 dimensions, each with
// its own scale (as llama.cpp's q8_0 query for a q8_0 K cache): a block of
// small values next to a block with one large value keeps its resolution.
// Here only the small block meets nonzero keys; one scale for the whole row
// (100 / 127) would round it to zeros and attend uniformly.
TEST(FlashQ8Test, QueryBlocksKeepTheirOwnScale) {
  const KernelTable k = MakeBestKernelTable();
  std::mt19937 rng(5);
  const int hd = 64;
  const int32_t len = 200;
  const auto slots = PagedSlots(len, 16, rng);
  Cache c(int64_t(slots.size()), hd, rng);
  for (int64_t s = 0; s < int64_t(slots.size()); ++s) {  // keys zero in the first block; the layouts rebuilt
    for (int d = 0; d < 32; ++d) c.k[s * hd + d] = 0;
    for (int d = 0; d < hd; ++d) c.kt[FlashKIndex(s, d, hd)] = c.k[s * hd + d];
    c.ks[s] = QuantizeKvRowTo(c.k.data() + s * hd, hd, [&](int d, int8_t v) { c.k8t[FlashKIndex(s, d, hd)] = v; });
  }
  std::vector<float> q(hd, 0.0f);
  q[0] = 100.0f;
  for (int d = 32; d < hd; ++d) q[d] = std::uniform_real_distribution<float>(-0.3f, 0.3f)(rng);
  const auto f32 = Attend(k, c, kF32Cache, q.data(), 1, 1, hd, len - 1, 0, slots, 4.0f, 0.0f);
  const auto q8 = Attend(k, c, kQ8Cache, q.data(), 1, 1, hd, len - 1, 0, slots, 4.0f, 0.0f);
  std::vector<float> uniform(hd, 0.0f);  // what a zero query gives: the mean of V
  for (int32_t p = 0; p < len; ++p) {
    for (int d = 0; d < hd; ++d) uniform[d] += c.v[int64_t(slots[p]) * hd + d] / len;
  }
  double err = 0, off_uniform = 0, norm = 0;
  for (int d = 0; d < hd; ++d) {
    err = std::max(err, std::fabs(double(q8[d]) - f32[d]));
    off_uniform = std::max(off_uniform, std::fabs(double(f32[d]) - uniform[d]));
    norm = std::max(norm, std::fabs(double(f32[d])));
  }
  EXPECT_GT(off_uniform, 0.2 * norm) << "the small block should matter";
  EXPECT_LT(err, 0.03 * norm) << "off uniform " << off_uniform << ", norm " << norm;
}

// The AVX2 and AVX-512 levels' own int8 paths (float products of the
// quantized query), which CPUs with AVX-VNNI / AVX512-VNNI replace
// (avxvnni::FillFlash, avx512vnni::FillFlash), give the definition's bits
// too.
TEST(FlashQ8Test, LevelsWithoutVnniMatchDefinition) {
  const CpuIsa best = MakeBestKernelTable().isa;
  if (best < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  std::vector<std::pair<const char*, void (*)(KernelTable*)>> levels = {{"avx2", avx2::FillFlash}};
  if (best >= CpuIsa::kAvx512) levels.push_back({"avx512", avx512::FillFlash});
  for (const auto& [name, fill] : levels) {
    KernelTable plain = MakeKernelTable(CpuIsa::kScalar);
    fill(&plain);
    std::mt19937 rng(41);
    for (const int hd : {32, 40, 64, 96, 128}) {
      for (const int g : {1, 3}) {
        for (const int nq : {1, 9}) {
          const int32_t p0 = 150;
          const auto slots = PagedSlots(p0 + nq, 16, rng);
          const Cache c(int64_t(slots.size()), hd, rng);
          const auto q = RandomVec(int64_t(nq) * g * hd, rng, 0.7f);
          const auto a = Attend(plain, c, kQ8Cache, q.data(), nq, g, hd, p0, 0, slots, 0.1f, 0.0f);
          const auto r = Attend(ref, c, kQ8Cache, q.data(), nq, g, hd, p0, 0, slots, 0.1f, 0.0f);
          EXPECT_EQ(std::memcmp(a.data(), r.data(), a.size() * 4), 0)
              << name << " hd " << hd << " g " << g << " nq " << nq;
        }
      }
    }
  }
}

// A NaN score (here a NaN in one cached K row) is left out of the running
// max and gets p = 0 in the definition (std::max passes over NaN,
// ExpNonPositive(NaN) is 0): every ISA's kernel gives the definition's bits
// and finite outputs, with f32 and int8 caches, whichever lane of a step the
// NaN sits in.
TEST_P(FlashIsaTest, NanScoresAreLeftOutAsTheDefinitionLeavesThemOut) {
  const KernelTable ref = MakeKernelTable(CpuIsa::kScalar);
  const KernelTable k = MakeKernelTable(GetParam());
  std::mt19937 rng(31);
  const int hd = 64, g = 3, nq = 10;
  const int32_t p0 = 120;
  const auto slots = PagedSlots(p0 + nq, 16, rng);
  for (const int32_t bad : {0, 5, 70, 127}) {
    Cache c(int64_t(slots.size()), hd, rng);
    c.kt[FlashKIndex(slots[bad], 7, hd)] = NAN;
    c.ks[slots[bad]] = NAN;
    const auto q = RandomVec(int64_t(nq) * g * hd, rng, 0.7f);
    for (const int cache : {kF32Cache, kQ8Cache}) {
      const auto out = Attend(k, c, cache, q.data(), nq, g, hd, p0, 0, slots, 0.1f, 0.0f);
      const auto want = Attend(ref, c, cache, q.data(), nq, g, hd, p0, 0, slots, 0.1f, 0.0f);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * 4), 0) << "position " << bad << " cache " << cache;
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
          << "position " << bad << " cache " << cache;
    }
  }
}

// Every SIMD level runs a hand-written kernel for the bf16 form, not the
// generic loops: compiled for AVX-512 without AVX512-BF16 (Ice Lake class)
// they ran 2.1-2.9 GFLOP/s against the AVX2 kernel's 15-26 on the same CPU,
// and the scalar ones about 2 (bf16 caches then prefilled for minutes).
TEST_P(FlashIsaTest, Bf16FormRunsAHandWrittenKernel) {
  const KernelTable k = MakeKernelTable(GetParam());
  const std::string variant = k.flash_bf16_variant;
  if (GetParam() == CpuIsa::kScalar) {
    EXPECT_EQ(variant, "scalar (bf16 emulated)");
  } else {
    EXPECT_EQ(variant.find("generic"), std::string::npos) << variant;
    EXPECT_EQ(variant.find("scalar"), std::string::npos) << variant;
  }
}

// The table with bf16 attention products (`--attn-dtype bf16`).
KernelTable Bf16Table(CpuIsa isa) {
  KernelTable k = MakeKernelTable(isa);
  k.attn_bf16 = true;
  return k;
}

// The bf16 tables to test at `isa`: its own and, at the AVX-512 level of a
// CPU with AVX512-BF16, also the AVX-512 level's kernel with the bf16
// instructions emulated (avx512::FillFlashBf16), which only CPUs without
// AVX512-BF16 (Ice Lake class) otherwise run.
std::vector<KernelTable> Bf16Tables(CpuIsa isa) {
  std::vector<KernelTable> tables{Bf16Table(isa)};
  if (tables[0].isa >= CpuIsa::kAvx512 &&
      std::string(tables[0].flash_bf16_variant).find("emulated") == std::string::npos) {
    KernelTable emulated = tables[0];
    avx512::FillFlashBf16(&emulated);
    tables.push_back(emulated);
  }
  return tables;
}

// bf16 products: every ISA's kernel gives the scalar definition's bits
// (FlashChunkGenericBf16, itself checked against the instructions in
// bf16_generic_test.cc), a block of tokens gives each token its bits alone,
// int8 caches are untouched by the mode, a bf16 cache (K and V stored
// rounded, read in place or gathered for any block size) gives the same bits
// as an f32 cache with bf16 products, and the error against f32 products
// stays within bf16's rounding: relative max error < 1.5e-2 (measured
// 4.3e-3) over lengths across tile, step and chunk boundaries, paged and
// gathered K and V (blocks of 1, 3, 8, 16, 32 slots), GQA, windows,
// soft-capping, an odd head size.
TEST_P(FlashIsaTest, Bf16ProductsMatchDefinitionAndStayClose) {
  const KernelTable ref = Bf16Table(CpuIsa::kScalar);
  const KernelTable f32 = MakeKernelTable(CpuIsa::kScalar);
  for (const KernelTable& k : Bf16Tables(GetParam())) {
    std::mt19937 rng(41);
    struct Case {
      int hd, g, nq;
      int32_t p0, window;
      float cap;
      int block;
    };
    const Case cases[] = {
        {64, 1, 1, 0, 0, 0, 16},      {64, 4, 1, 99, 0, 0, 16},      {64, 2, 1, 600, 0, 0, 8},
        {64, 3, 10, 250, 0, 0, 16},   {64, 1, 32, 7, 0, 0, 32},      {80, 4, 8, 500, 0, 0, 16},
        {128, 2, 16, 37, 20, 0, 16},  {65, 3, 9, 300, 0, 30.0f, 16}, {256, 1, 5, 130, 0, 0, 8},
        {64, 8, 4, 1000, 300, 0, 16}, {64, 3, 7, 201, 0, 0, 1},      {80, 2, 6, 77, 0, 0, 3},
    };
    double worst = 0;
    for (const Case& cs : cases) {
      const int32_t n = cs.p0 + cs.nq;
      const auto slots = PagedSlots(n, cs.block, rng);
      const Cache c(int64_t(slots.size()), cs.hd, rng);
      const auto q = RandomVec(int64_t(cs.nq) * cs.g * cs.hd, rng, 0.7f);
      const std::string what = std::string(k.flash_bf16_variant) + ": hd " + std::to_string(cs.hd) + " p0 " +
                               std::to_string(cs.p0) + " nq " + std::to_string(cs.nq) + " block " +
                               std::to_string(cs.block);
      auto attend = [&](const KernelTable& t, int cache, const float* qi, int nq, int32_t p0) {
        return Attend(t, c, cache, qi, nq, cs.g, cs.hd, p0, cs.window, slots, 0.1f, cs.cap);
      };
      const auto block = attend(k, kF32Cache, q.data(), cs.nq, cs.p0);
      const auto block_ref = attend(ref, kF32Cache, q.data(), cs.nq, cs.p0);
      const auto exact = attend(f32, kF32Cache, q.data(), cs.nq, cs.p0);
      EXPECT_EQ(std::memcmp(block.data(), block_ref.data(), block.size() * 4), 0) << what;
      double err = 0, norm = 0;
      for (size_t i = 0; i < block.size(); ++i) {
        err = std::max(err, std::fabs(double(block[i]) - exact[i]));
        norm = std::max(norm, std::fabs(double(exact[i])));
      }
      worst = std::max(worst, err / norm);
      EXPECT_LT(err / norm, 1.5e-2) << what;
      EXPECT_GT(err, 0.0) << what << ": bf16 rounding should show";
      const size_t row = size_t(cs.g) * cs.hd;
      for (int i = 0; i < cs.nq; ++i) {
        const auto alone = attend(k, kF32Cache, q.data() + i * row, 1, cs.p0 + i);
        const auto alone16 = attend(k, kBf16Cache, q.data() + i * row, 1, cs.p0 + i);
        EXPECT_EQ(std::memcmp(alone16.data(), alone.data(), row * 4), 0) << "bf16 cache, token " << i << " " << what;
        EXPECT_EQ(std::memcmp(alone.data(), block.data() + i * row, row * 4), 0) << "token " << i << " " << what;
      }
      const auto q8 = attend(k, kQ8Cache, q.data(), cs.nq, cs.p0);  // int8 caches keep the int8 kernel
      const auto q8_f32 = attend(f32, kQ8Cache, q.data(), cs.nq, cs.p0);
      EXPECT_EQ(std::memcmp(q8.data(), q8_f32.data(), q8.size() * 4), 0) << what;
      // A bf16 cache holds the rounded values: the same bits, whatever the
      // table's mode (its kernel is always the bf16 one).
      KernelTable f32_products = k;
      f32_products.attn_bf16 = false;
      const auto cache16 = attend(f32_products, kBf16Cache, q.data(), cs.nq, cs.p0);
      EXPECT_EQ(std::memcmp(cache16.data(), block.data(), block.size() * 4), 0) << "bf16 cache, " << what;
    }
    std::printf("bf16 products (%s): worst relative error %.2e against f32\n", k.flash_bf16_variant, worst);
  }
}

// bf16 products near the bottom of f32's range: queries and values of
// about 1e-38 (and a scale of 1e37), so that partial dots, o * corr and
// the value sums land on denormals, which VDPBF16PS (and so the definition) flushes to signed
// zeros after each multiply-add: every ISA's kernel gives the definition's
// bits with f32 and bf16 caches (AVX2 and the AVX-512 level without
// AVX512-BF16 emulate the flushes).
TEST_P(FlashIsaTest, Bf16DenormalsFlushAsTheDefinitionFlushesThem) {
  const KernelTable ref = Bf16Table(CpuIsa::kScalar);
  for (const KernelTable& k : Bf16Tables(GetParam())) {
    std::mt19937 rng(43);
    const int hd = 64, g = 2, nq = 6;
    const int32_t p0 = 90;
    const auto slots = PagedSlots(p0 + nq, 16, rng);
    Cache c(int64_t(slots.size()), hd, rng);
    for (size_t s = 0; s < slots.size(); ++s) {
      for (int d = 0; d < hd; ++d) {
        float& v = c.v[s * hd + d];
        v *= 3e-38f;
        c.v16[FlashV16Index(int64_t(s), d, hd)] = Bf16Round(v);
      }
    }
    auto q = RandomVec(int64_t(nq) * g * hd, rng, 3e-38f);
    int denormal_inputs = 0;
    for (float x : q) denormal_inputs += x != 0 && std::fabs(x) < 1.17549435e-38f;
    EXPECT_GT(denormal_inputs, 0);
    for (const int cache : {kF32Cache, kBf16Cache}) {
      // A scale of 1e37 brings the dots (and what a flush changes in them)
      // back to scores of about 1.
      const auto out = Attend(k, c, cache, q.data(), nq, g, hd, p0, 0, slots, 1e37f, 0.0f);
      const auto want = Attend(ref, c, cache, q.data(), nq, g, hd, p0, 0, slots, 1e37f, 0.0f);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * 4), 0) << k.flash_bf16_variant << ", cache " << cache;
      int nonzero = 0;
      for (float x : out) nonzero += x != 0;
      EXPECT_GT(nonzero, 0) << "cache " << cache;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, FlashIsaTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& i) { return std::string(CpuIsaName(i.param)); });

// AttendBatch: a sequence's last token decoded alone (its chunks of
// positions split over two threads, the KV heads not dividing evenly) equals the same token inside a prefill
// batch (blocks, no split), and a second sequence in the batch changes
// nothing; f32 and int8 caches, with and without a window; KV blocks of 16
// (K tiles read in place) and of 8 slots (gathered); f32 and bf16 products.
// The f32 cache's results match the naive reference (bf16: within 2e-2).
TEST(AttendBatch, SplitDecodeEqualsPrefillAndBatching) {
  std::mt19937 rng(31);
  ThreadPool pool(2);
  struct Mode {
    KvType type;
    bool bf16;  // int8 caches ignore the mode
  };
  for (const Mode mode : {Mode{KvType::kF32, false}, Mode{KvType::kQ8, false}, Mode{KvType::kF32, true},
                          Mode{KvType::kBF16, false}}) {
    const KvType type = mode.type;
    const bool bf16 = mode.bf16 || type == KvType::kBF16;
    KernelTable k = MakeBestKernelTable();
    k.attn_bf16 = bf16;
    for (int window : {0, 100}) {
      for (int block : {16, 8}) {
        AttentionShape s;
        // 5 KV heads on 2 threads: the decode still splits (whole heads would
        // be dealt 3 against 2).
        s.n_head = 10;
        s.n_head_kv = 5;
        s.head_dim = 64;
        s.scale = 0.125f;
        s.sliding_window = window;
        const int hd = s.head_dim, kvd = s.kv_dim(), group = s.n_head / s.n_head_kv;
        const int32_t L = 700, L2 = 40;
        const int32_t n_slots = L + L2 + 16;
        KvStorage kv({s.n_head_kv}, n_slots, hd, type);
        // Sequences a and b in interleaved blocks of `block` slots.
        std::vector<int32_t> slots_a(L), slots_b(L2);
        int32_t next = 0;
        for (int32_t p0 = 0; p0 < L; p0 += block) {
          for (int32_t p = p0; p < std::min(L, p0 + block); ++p) slots_a[p] = next + p - p0;
          next += block;
          if (p0 < L2) {
            for (int32_t p = p0; p < std::min(L2, p0 + block); ++p) slots_b[p] = next + p - p0;
            next += block;
          }
        }
        ASSERT_LE(next, n_slots);
        std::vector<float> kc(size_t(n_slots) * kvd), vc(kc.size());
        for (int32_t slot = 0; slot < n_slots; ++slot) {
          const auto kr = RandomVec(kvd, rng), vr = RandomVec(kvd, rng);
          std::copy(kr.begin(), kr.end(), kc.begin() + size_t(slot) * kvd);
          std::copy(vr.begin(), vr.end(), vc.begin() + size_t(slot) * kvd);
          WriteKv(kv, 0, slot, kr.data(), vr.data(), s.n_head_kv, hd);
        }
        const std::vector<const std::vector<int32_t>*> seq_slots = {&slots_a, &slots_b};
        // Batch: all of a's tokens then all of b's.
        std::vector<int32_t> pos, seq;
        for (int32_t p = 0; p < L; ++p) pos.push_back(p), seq.push_back(0);
        for (int32_t p = 0; p < L2; ++p) pos.push_back(p), seq.push_back(1);
        const int32_t T = static_cast<int32_t>(pos.size());
        const auto q = RandomVec(int64_t(T) * s.q_dim(), rng, 0.5f);
        std::vector<float> out(size_t(T) * s.q_dim());
        AttentionWorkspace ws;
        AttendBatch(k, pool, kv, 0, s, TokenSlots{pos.data(), seq.data(), &seq_slots}, T, q.data(), out.data(), ws);
        // a's last token alone.
        const int32_t last_pos = L - 1, zero = 0;
        std::vector<float> alone(s.q_dim());
        AttendBatch(k, pool, kv, 0, s, TokenSlots{&last_pos, &zero, &seq_slots}, 1,
                    q.data() + size_t(L - 1) * s.q_dim(), alone.data(), ws);
        EXPECT_EQ(std::memcmp(alone.data(), out.data() + size_t(L - 1) * s.q_dim(), alone.size() * 4), 0)
            << "window " << window << " q8 " << (type == KvType::kQ8) << " block " << block << " bf16 " << bf16;
        if (type == KvType::kQ8) continue;
        double err = 0;
        std::vector<float> scores(L), naive(hd);
        for (int32_t t = 0; t < T; t += 7) {
          const std::vector<int32_t>& sl = *seq_slots[seq[t]];
          const int32_t first = window > 0 ? std::max(0, pos[t] - window + 1) : 0;
          for (int h = 0; h < s.n_head; ++h) {
            const int kvh = h / group;
            k.attend_head(q.data() + size_t(t) * s.q_dim() + h * hd, kc.data() + kvh * hd, vc.data() + kvh * hd, kvd,
                          hd, s.scale, 0.0f, sl.data(), first, pos[t], scores.data(), naive.data());
            for (int d = 0; d < hd; ++d) {
              err = std::max(err, std::fabs(double(out[size_t(t) * s.q_dim() + h * hd + d]) - naive[d]));
            }
          }
        }
        EXPECT_LT(err, bf16 ? 2e-2 : 1e-5) << "window " << window << " block " << block << " bf16 " << bf16;
      }
    }
  }
}

}  // namespace
}  // namespace infera::flash_test
