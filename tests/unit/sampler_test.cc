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
