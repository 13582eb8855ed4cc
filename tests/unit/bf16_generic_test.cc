// bf16_generic.h's scalar forms against the AVX512-BF16 instructions they
// define (VCVTNEPS2BF16, VCVTNE2PS2BF16, VDPBF16PS), bit for bit, on random
// bit patterns (denormals, infinities and NaNs included) when the CPU has
// them; and the bf16 attention kernel is the one chosen there.
#include "kernels/bf16_generic.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "base/cpu_features.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace infera::bf16_generic_test {
namespace {

#if defined(__x86_64__)
// out[i] = VCVTNEPS2BF16(x[i]) for 16 floats; pairs: VCVTNE2PS2BF16 of
// (x[16..32), x[0..16)) -> 32 words.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void Convert(const float* x, uint16_t* one, uint16_t* two) {
  const __m256bh a = _mm512_cvtneps_pbh(_mm512_loadu_ps(x));
  std::memcpy(one, &a, 32);
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
  std::memcpy(two, &b, 64);
}
// acc[16] = VDPBF16PS(acc, a [32 words], b [32 words]).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void DotPairs(float* acc, const uint16_t* a, const uint16_t* b) {
  __m512bh va, vb;
  std::memcpy(&va, a, 64);
  std::memcpy(&vb, b, 64);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), va, vb));
}
#endif

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(Bf16Generic, MatchesTheInstructionsBitForBit) {
#if defined(__x86_64__)
  if (!DetectCpuFeatures().avx512bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16: nothing to compare with";
  std::mt19937 rng(7);
  auto any_float = [&] {
    const uint32_t u = rng();
    switch (rng() % 4) {
      case 0:
        return F32FromBits(u);  // any bits: NaN, inf, denormal, ...
      case 1:
        return F32FromBits(u & 0x807FFFFFu);  // denormal or zero
      default:
        return F32FromBits((u & 0x81FFFFFFu) | 0x3E000000u);  // ordinary magnitudes
    }
  };
  int64_t rounded = 0, dots = 0;
  for (int it = 0; it < 20000; ++it) {
    float x[32];
    for (float& v : x) v = any_float();
    uint16_t one[16], two[32];
    Convert(x, one, two);
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(one[i], Bf16Round(x[i])) << std::hex << F32Bits(x[i]);
      ASSERT_EQ(two[i], Bf16Round(x[i])) << std::hex << F32Bits(x[i]);
      ASSERT_EQ(two[16 + i], Bf16Round(x[16 + i])) << std::hex << F32Bits(x[16 + i]);
      rounded += 3;
    }
    uint16_t a[32], b[32];
    float acc[16], want[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = Bf16Round(any_float());
      b[i] = Bf16Round(any_float());
    }
    for (int i = 0; i < 16; ++i) {
      acc[i] = any_float();
      want[i] = DotBf16Pair(acc[i], Bf16ToF32(a[2 * i]), Bf16ToF32(b[2 * i]), Bf16ToF32(a[2 * i + 1]),
                            Bf16ToF32(b[2 * i + 1]));
    }
    DotPairs(acc, a, b);
    for (int i = 0; i < 16; ++i) {
      const bool both_nan = std::isnan(acc[i]) && std::isnan(want[i]);
      ASSERT_TRUE(both_nan || SameBits(acc[i], want[i])) << "lane " << i << ": " << acc[i] << " vs " << want[i];
      ++dots;
    }
  }
  std::printf("checked %lld roundings and %lld pair dots\n", static_cast<long long>(rounded),
              static_cast<long long>(dots));
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

TEST(Bf16Generic, TheAvx512Bf16AttentionKernelIsChosenWhereAvailable) {
  const CpuFeatures f = DetectCpuFeatures();
  if (f.BestIsa() < CpuIsa::kAvx512 || !f.avx512bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  EXPECT_STREQ(MakeKernelTable(CpuIsa::kAvx512).flash_bf16_variant, "avx512bf16-tiled");
  EXPECT_STRNE(MakeKernelTable(CpuIsa::kAvx2).flash_bf16_variant, "avx512bf16-tiled");
}

}  // namespace
}  // namespace infera::bf16_generic_test
