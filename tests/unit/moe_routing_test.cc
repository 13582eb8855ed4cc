// MoE routing: the top-k experts by router logit, ties to the lower index,
// weights from the softmax over all experts (renormalized or not).
#include "model/moe.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace infera::moe_routing_test {
namespace {

TEST(MoeRoutingTest, TopKWithSoftmaxWeights) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  int32_t e[2];
  float w[2];
  RouteToken(logits.data(), 4, 2, /*renormalize=*/false, e, w);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  EXPECT_NEAR(w[0], std::exp(2.0) / total, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.0) / total, 1e-6);
  RouteToken(logits.data(), 4, 2, /*renormalize=*/true, e, w);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);  // softmax over the two chosen logits
}

TEST(MoeRoutingTest, TiesGoToTheLowerIndex) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 3.0f, 0.0f};
  int32_t e[2];
  float w[2];
  RouteToken(logits.data(), 5, 2, true, e, w);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 2);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  // Logits whose probabilities underflow to 0 still order by logit, then index.
  const std::vector<float> far = {-300.0f, -200.0f, -200.0f, 50.0f};
  RouteToken(far.data(), 4, 2, false, e, w);
  EXPECT_EQ(e[0], 3);
  EXPECT_EQ(e[1], 1);
}

TEST(MoeRoutingTest, AllExpertsChosen) {
  const std::vector<float> logits = {0.0f, -3.0f, 1.0f};
  int32_t e[3];
  float w[3];
  RouteToken(logits.data(), 3, 3, false, e, w);
  EXPECT_EQ(e[0], 2);
  EXPECT_EQ(e[1], 0);
  EXPECT_EQ(e[2], 1);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

}  // namespace
}  // namespace infera::moe_routing_test
