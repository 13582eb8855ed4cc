#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "engine/generator.h"
#include "model/loader.h"
#include "tokenizer/loader.h"
#include "unit/test_util.h"

namespace infera {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  KernelTable kernels = MakeBestKernelTable();
  ThreadPool pool{2};
  explicit Fixture(const std::string& path) {
    auto m = LoadModel(path);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
  }
};

std::vector<int32_t> SomeTokens(int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % vocab);
  return t;
}

std::vector<float> AllLogits(Fixture& f, const std::vector<int32_t>& toks, int32_t chunk) {
  Generator g(*f.model, nullptr, f.kernels, f.pool, static_cast<int32_t>(toks.size()), chunk);
  std::vector<float> out;
  Status st = g.FeedAllLogits(toks, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// Incremental decoding with the KV cache gives the logits of re-running the
// whole prefix: bit-identical, since kernels are batch-invariant.
void ExpectIncrementalEqualsFull(const ModelConfig& c, DType type, const std::string& name) {
  Fixture f(testing::WriteTinyModel(c, type, 99, name));
  const auto toks = SomeTokens(40, c.n_vocab);
  const auto full = AllLogits(f, toks, 40);
  for (int32_t chunk : {1, 7, 16}) {
    const auto inc = AllLogits(f, toks, chunk);
    ASSERT_EQ(inc.size(), full.size());
    for (size_t t = 0; t < toks.size(); ++t) {
      double max_abs = 0, max_diff = 0;
      for (int v = 0; v < c.n_vocab; ++v) {
        max_abs = std::max(max_abs, std::fabs(double(full[t * c.n_vocab + v])));
        max_diff = std::max(max_diff, std::fabs(double(full[t * c.n_vocab + v]) - inc[t * c.n_vocab + v]));
      }
      EXPECT_LE(max_diff, 1e-5 * max_abs) << "chunk " << chunk << " pos " << t;
    }
    EXPECT_EQ(std::memcmp(inc.data(), full.data(), full.size() * 4), 0) << "chunk " << chunk << " not bit-identical";
  }
}

TEST(Generator, IncrementalEqualsFullF32) { ExpectIncrementalEqualsFull(testing::TinyConfig(), DType::kF32, "inc_f32.gguf"); }
TEST(Generator, IncrementalEqualsFullF16) { ExpectIncrementalEqualsFull(testing::TinyConfig(), DType::kF16, "inc_f16.gguf"); }
TEST(Generator, IncrementalEqualsFullSlidingWindow) {
  ModelConfig c = testing::TinyConfig();
  c.sliding_window = 8;
  ExpectIncrementalEqualsFull(c, DType::kBF16, "inc_swa.gguf");
}

TEST(Generator, SlidingWindowChangesLogitsPastTheWindow) {
  ModelConfig c = testing::TinyConfig();
  Fixture full_attn(testing::WriteTinyModel(c, DType::kF32, 5, "sw_a.gguf"));
  c.sliding_window = 4;
  Fixture windowed(testing::WriteTinyModel(c, DType::kF32, 5, "sw_b.gguf"));
  const auto toks = SomeTokens(12, c.n_vocab);
  const auto a = AllLogits(full_attn, toks, 12), b = AllLogits(windowed, toks, 12);
  // Identical within the window, different after it.
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * c.n_vocab * 4), 0);
  EXPECT_NE(std::memcmp(a.data() + 11 * c.n_vocab, b.data() + 11 * c.n_vocab, c.n_vocab * 4), 0);
}

TEST(Generator, StopsWhenContextIsFull) {
  ModelConfig c = testing::TinyConfig();
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 1, "ctx.gguf"));
  Generator g(*f.model, nullptr, f.kernels, f.pool, 10);
  GenerateOptions o;
  o.sampling.temperature = 0;
  auto r = g.Generate({1, 5, 6}, o, nullptr, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->finish, FinishReason::kContextFull);
  EXPECT_EQ(g.n_past(), 10);
}

TEST(Generator, MaxTokensAndBadInput) {
  ModelConfig c = testing::TinyConfig();
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 1, "max.gguf"));
  Generator g(*f.model, nullptr, f.kernels, f.pool, 64);
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.max_tokens = 5;
  auto r = g.Generate({1, 5}, o, nullptr, false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->tokens.size(), 5u);

  g.Reset();
  std::vector<float> logits;
  Status st = g.Feed({1, 99999}, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.n_past(), 0);
  auto too_long = g.Generate(SomeTokens(65, c.n_vocab), o, nullptr, false);
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
}

TEST(Generator, Stories260KGreedyMatchesLlama2c) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  const std::string dir = testing::SharedDir() + "/models/stories260K";
  Fixture f(dir + "/stories260K.gguf");
  auto g = GgufFile::Open(dir + "/stories260K.gguf");
  auto tok = TokenizerFromGguf(**g);
  ASSERT_TRUE(tok.ok());
  Generator gen(*f.model, tok->get(), f.kernels, f.pool, 512);
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.max_tokens = 20;
  auto r = gen.Generate({1}, o, nullptr, false);
  ASSERT_TRUE(r.ok());
  // First generated ids listed in ../shared/models/stories260K/SOURCE.txt.
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                             426, 338, 401, 396, 267, 337}));
}

}  // namespace
}  // namespace infera
