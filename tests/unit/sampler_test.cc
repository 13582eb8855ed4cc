#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace infera::sampler_test {
namespace {

TEST(Sampler, GreedyPicksArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, 2.9f, -1.0f};
  EXPECT_EQ(s.Sample(l.data(), 4, {}), 1);
}

TEST(Sampler, SeedIsReproducible) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 42;
  p.has_seed = true;
  std::vector<float> base(50);
  for (int i = 0; i < 50; ++i) base[i] = static_cast<float>(i % 7);
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 100; ++i) {
    auto l1 = base, l2 = base;
    sa.push_back(a.Sample(l1.data(), 50, {}));
    sb.push_back(b.Sample(l2.data(), 50, {}));
  }
  EXPECT_EQ(sa, sb);
  std::map<int32_t, int> distinct;
  for (auto x : sa) distinct[x]++;
  EXPECT_GT(distinct.size(), 3u);  // it actually samples
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l = {0.0f, 0.5f, 0.4f};
    EXPECT_EQ(s.Sample(l.data(), 3, {}), 1);
  }
}

TEST(Sampler, TopPAndMinPCut) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.min_p = 0;
  p.seed = 1;
  p.has_seed = true;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = {5.0f, 0.0f, 0.0f, 0.0f};  // p(0) > 0.5
    EXPECT_EQ(s.Sample(l.data(), 4, {}), 0);
  }
  p.top_p = 1.0f;
  p.min_p = 0.5f;
  Sampler m(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = {1.0f, 1.0f - 0.1f, -3.0f};
    EXPECT_NE(m.Sample(l.data(), 3, {}), 2);
  }
}

TEST(Sampler, PenaltiesChangeGreedyChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f};
  EXPECT_EQ(s.Sample(l.data(), 2, {0, 0}), 1);  // 2.0 / 2 = 1.0 < 1.5
  SamplingParams q;
  q.temperature = 0;
  q.frequency_penalty = 0.3f;
  q.presence_penalty = 0.0f;
  Sampler f(q);
  std::vector<float> l2 = {2.0f, 1.5f};
  EXPECT_EQ(f.Sample(l2.data(), 2, {0, 0}), 1);  // 2.0 - 0.6 = 1.4
}

// The distribution the draw used (post-sampling probabilities): after
// top-k and temperature, softmax(logit / T) over the k kept tokens, most
// probable first; the drawn token's entry among them.
TEST(Sampler, LastDistributionIsTheDrawnFrom) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 7;
  p.has_seed = true;
  Sampler s(p);
  const std::vector<float> base = {1.0f, 3.0f, -2.0f, 2.5f, 2.0f, 0.0f};
  double z = 0;
  for (int id : {1, 3, 4}) z += std::exp(base[id] / 0.7);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = base;
    const int32_t t = s.Sample(l.data(), 6, {});
    float lp = 0;
    int32_t rank = 0;
    std::vector<std::pair<int32_t, float>> top;
    s.LastDistribution(t, 5, &lp, &top, &rank);
    EXPECT_EQ(rank, t == 1 ? 1 : t == 3 ? 2 : 3);
    ASSERT_EQ(top.size(), 3u);  // only the kept tokens: probability 0 is left out
    EXPECT_EQ(top[0].first, 1);
    EXPECT_EQ(top[1].first, 3);
    EXPECT_EQ(top[2].first, 4);
    double sum = 0;
    for (const auto& [id, l2] : top) {
      EXPECT_NEAR(l2, base[id] / 0.7 - std::log(z), 1e-5);
      sum += std::exp(l2);
      if (id == t) {
        EXPECT_EQ(l2, lp);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    EXPECT_NEAR(lp, base[t] / 0.7 - std::log(z), 1e-5);
    s.LastDistribution(t, 1, &lp, &top, &rank);
    EXPECT_EQ(top.size(), 1u);
    seen[t]++;
  }
  EXPECT_EQ(seen.size(), 3u);  // it samples among the three
  // Greedy: the argmax with probability 1.
  p.temperature = 0;
  Sampler g(p);
  std::vector<float> l = base;
  const int32_t t = g.Sample(l.data(), 6, {});
  float lp = -1;
  int32_t rank = 0;
  std::vector<std::pair<int32_t, float>> top;
  g.LastDistribution(t, 4, &lp, &top, &rank);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(t, 1);
  EXPECT_EQ(lp, 0.0f);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0], std::make_pair(1, 0.0f));
}

TEST(Sampler, ValidatesParams) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.temperature = 1;
  p.top_p = 0;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.top_p = 1.5f;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.top_p = 1;
  p.temperature = NAN;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
}

}  // namespace
}  // namespace infera::sampler_test
