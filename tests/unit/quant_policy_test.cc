// llama.cpp's per-tensor type rules: output tensor, Q4_K_M-style mixtures and
// the fallback for rows that do not fit a 256-element super-block.
#include <gtest/gtest.h>

#include "quant/policy.h"

namespace infera::quant_policy_test {
namespace {

TEST(QuantPolicy, ParsesTypesAndPresets) {
  ASSERT_TRUE(ParseQuantTarget("Q4_K_M").has_value());
  EXPECT_EQ(ParseQuantTarget("q4_k_m")->base, DType::kQ4_K);
  EXPECT_EQ(ParseQuantTarget("q4_k_m")->ftype, 15u);
  EXPECT_EQ(ParseQuantTarget("q8_0")->ftype, 7u);
  EXPECT_FALSE(ParseQuantTarget("q9_9").has_value());
  EXPECT_FALSE(ParseQuantTarget("iq2_xxs").has_value());
}

TEST(QuantPolicy, FallsBackLikeLlamaCpp) {
  EXPECT_EQ(FallbackForShape(DType::kQ4_K, 960), DType::kQ5_0);
  EXPECT_EQ(FallbackForShape(DType::kQ5_K, 960), DType::kQ5_1);
  EXPECT_EQ(FallbackForShape(DType::kQ6_K, 960), DType::kQ8_0);
  EXPECT_EQ(FallbackForShape(DType::kQ2_K, 960), DType::kIQ4_NL);
  EXPECT_EQ(FallbackForShape(DType::kQ3_K, 2560), DType::kQ3_K);
  EXPECT_EQ(FallbackForShape(DType::kQ4_K, 48), DType::kF16);
  EXPECT_EQ(FallbackForShape(DType::kQ8_0, 48), DType::kF16);
}

TEST(QuantPolicy, MixtureAndOutputRules) {
  const QuantTarget m = *ParseQuantTarget("q4_k_m");
  const std::string out = "output.weight";
  // use_more_bits over 32 layers: 0..3, 28..31 and every third from 6.
  EXPECT_EQ(ChooseTensorType(m, "blk.0.attn_v.weight", 1024, 32, out, false), DType::kQ6_K);
  EXPECT_EQ(ChooseTensorType(m, "blk.4.attn_v.weight", 1024, 32, out, false), DType::kQ4_K);
  EXPECT_EQ(ChooseTensorType(m, "blk.6.ffn_down.weight", 1024, 32, out, false), DType::kQ6_K);
  EXPECT_EQ(ChooseTensorType(m, "blk.7.ffn_down.weight", 1024, 32, out, false), DType::kQ4_K);
  EXPECT_EQ(ChooseTensorType(m, "blk.31.ffn_down.weight", 1024, 32, out, false), DType::kQ6_K);
  EXPECT_EQ(ChooseTensorType(m, "blk.5.attn_q.weight", 1024, 32, out, false), DType::kQ4_K);
  EXPECT_EQ(ChooseTensorType(m, out, 1024, 32, out, false), DType::kQ6_K);
  // m360-like rows of 960: the output's Q6_K falls back to Q8_0.
  EXPECT_EQ(ChooseTensorType(*ParseQuantTarget("q4_0"), out, 960, 32, out, false), DType::kQ8_0);
  EXPECT_EQ(ChooseTensorType(*ParseQuantTarget("q4_0"), "blk.0.attn_q.weight", 960, 32, out, false), DType::kQ4_0);
  // --pure: no rules.
  EXPECT_EQ(ChooseTensorType(m, out, 1024, 32, out, true), DType::kQ4_K);
  EXPECT_EQ(ChooseTensorType(*ParseQuantTarget("q8_0"), out, 1024, 32, out, false), DType::kQ8_0);
}

}  // namespace
}  // namespace infera::quant_policy_test
