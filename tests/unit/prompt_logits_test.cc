// One sequence through the serving engine, as `run`, `perplexity`, `bench`
// and `eval-logits` use it: prompt logits (every position, once, in order)
// are the same however the prompt is chunked, batched with others, preempted
// or prefix-cached; prompt-only requests; context and max_tokens limits; and
// a real model's greedy tokens against llama2c's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "formats/gguf_reader.h"
#include "infera/engine.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "tokenizer/loader.h"
#include "unit/test_util.h"

namespace infera::prompt_logits_test {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  KernelTable kernels = MakeBestKernelTable();
  explicit Fixture(const std::string& path, const ModelLoadOptions& lo = {}) {
    auto m = LoadModel(path, lo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
  }
  std::unique_ptr<Engine> Make(EngineOptions o) {
    o.threads = 2;
    auto e = Engine::Create(*model, tok.get(), kernels, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }
};

std::vector<int32_t> SomeTokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 101 + 11) % vocab);
  return t;
}

RequestParams ScorePrompt(int32_t from) {
  RequestParams p;
  p.max_tokens = 0;
  p.prompt_logits_from = from;
  return p;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;
  int32_t next_pos = -1;  // position after the last prompt row received
  FinishReason finish = FinishReason::kNone;
  int32_t cached = 0;
};

// Runs the requests together; checks that prompt rows arrive in order, each
// position once.
std::vector<Result> RunAll(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                           const std::vector<RequestParams>& params, int32_t V) {
  std::map<uint64_t, size_t> idx;
  std::vector<Result> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Add(prompts[i], params[i]);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return out;
    idx[*id] = i;
    out[i].next_pos = params[i].prompt_logits_from;
  }
  int guard = 0;
  while (e.HasWork() && ++guard < 100000) {
    for (const RequestOutput& o : e.Step()) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      Result& r = out[idx.at(o.id)];
      r.tokens.insert(r.tokens.end(), o.tokens.begin(), o.tokens.end());
      if (!o.prompt_logits.empty()) {
        EXPECT_EQ(o.prompt_logits_pos, r.next_pos) << "prompt rows out of order or repeated";
        EXPECT_EQ(o.prompt_logits.size() % V, 0u);
        r.next_pos = o.prompt_logits_pos + static_cast<int32_t>(o.prompt_logits.size() / V);
        r.prompt_logits.insert(r.prompt_logits.end(), o.prompt_logits.begin(), o.prompt_logits.end());
      }
      if (o.finished) {
        r.finish = o.finish_reason;
        r.cached = o.cached_tokens;
      }
    }
  }
  EXPECT_EQ(e.Stats().kv_blocks_used, 0);
  return out;
}

// Logits of every position of `toks`, `chunk` tokens per step.
std::vector<float> AllLogits(Fixture& f, const std::vector<int32_t>& toks, int32_t chunk) {
  EngineOptions o;
  o.max_num_seqs = 1;
  o.max_batched_tokens = chunk;
  o.max_model_len = static_cast<int32_t>(toks.size());
  o.prefix_caching = false;
  auto e = f.Make(o);
  auto r = RunAll(*e, {toks}, {ScorePrompt(0)}, f.model->config.n_vocab);
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
  EXPECT_TRUE(r[0].tokens.empty());
  return r[0].prompt_logits;
}

// Incremental decoding with the KV cache gives the logits of running the
// whole prefix at once: bit-identical, since kernels are batch-invariant.
void ExpectIncrementalEqualsFull(const ModelConfig& c, DType type, const std::string& name) {
  Fixture f(testing::WriteTinyModel(c, type, 99, name));
  const auto toks = SomeTokens(40, c.n_vocab);
  const auto full = AllLogits(f, toks, 40);
  ASSERT_EQ(full.size(), toks.size() * c.n_vocab);
  for (int32_t chunk : {1, 7, 16}) {
    const auto inc = AllLogits(f, toks, chunk);
    ASSERT_EQ(inc.size(), full.size());
    EXPECT_EQ(std::memcmp(inc.data(), full.data(), full.size() * 4), 0) << "chunk " << chunk << " not bit-identical";
  }
}

// Float matrices stored as bf16 at load for bf16 products
// (ModelLoadOptions::float_weights_bf16) give the logits the file's F32 /
// F16 matrices give with bf16 products, bit for bit, in both forms of the
// products (16 lanes; a tile unit's, run on its software model), tied
// output or not; the token embedding stays as stored.
TEST(PromptLogits, Bf16StoredFloatMatricesGiveTheSameLogits) {
  for (DType type : {DType::kF32, DType::kF16}) {
    for (bool tied : {false, true}) {
      ModelConfig c = testing::TinyConfig();
      c.tied_embeddings = tied;
      const std::string path =
          testing::WriteTinyModel(c, type, 7, std::string("bf16w_") + DTypeName(type) + (tied ? "_tied" : "") + ".gguf");
      ModelLoadOptions lo;
      lo.kernel_isa = MakeBestKernelTable().isa;
      Fixture as_stored(path, lo);
      lo.float_weights_bf16 = true;
      Fixture as_bf16(path, lo);
      const ModelWeights& w = *as_bf16.model->weights;
      const std::string what = std::string(DTypeName(type)) + (tied ? " tied" : "");
      EXPECT_EQ(w.layers[0].wq.type, DType::kBF16) << what;
      EXPECT_EQ(w.layers[1].w_down.type, DType::kBF16) << what;
      EXPECT_EQ(w.output.type, DType::kBF16) << what;
      EXPECT_EQ(w.tok_embd.type, type) << what;
      if (type == DType::kF32) {
        EXPECT_LT(w.resident_bytes(), as_stored.model->weights->resident_bytes()) << what;
      }
      const auto toks = SomeTokens(24, c.n_vocab);
      for (bool tile_form : {false, true}) {
        if (tile_form && !DetectCpuFeatures().avx512bf16) continue;
        for (Fixture* f : {&as_stored, &as_bf16}) {
          f->kernels.matmul_bf16 = true;
          f->kernels.bf16_tile_rows = tile_form ? amx::Bf16TileRowsEmulated() : nullptr;
          f->kernels.bf16_pairs = tile_form ? amx::Bf16PairsAvx512() : nullptr;
        }
        const auto a = AllLogits(as_stored, toks, 24), b = AllLogits(as_bf16, toks, 24);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << (tile_form ? ", tile form" : "");
      }
    }
  }
}

TEST(PromptLogits, IncrementalEqualsFullF32) { ExpectIncrementalEqualsFull(testing::TinyConfig(), DType::kF32, "inc_f32.gguf"); }
TEST(PromptLogits, IncrementalEqualsFullF16) { ExpectIncrementalEqualsFull(testing::TinyConfig(), DType::kF16, "inc_f16.gguf"); }
TEST(PromptLogits, IncrementalEqualsFullSlidingWindow) {
  ModelConfig c = testing::TinyConfig();
  c.sliding_window = 8;
  ExpectIncrementalEqualsFull(c, DType::kBF16, "inc_swa.gguf");
}

TEST(PromptLogits, SlidingWindowChangesLogitsPastTheWindow) {
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

// Scoring requests batched with generating ones, under a pool small enough to
// preempt, with the prefix cache on and shared prefixes: every request's
// prompt rows are those it gets alone, and its tokens too.
TEST(PromptLogits, SameUnderBatchingPreemptionAndPrefixCache) {
  ModelConfig c = testing::TinyConfig();
  c.n_ctx_train = 512;
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 7, "pl_batch.gguf"));
  const int32_t V = c.n_vocab;
  const std::vector<int32_t> shared = SomeTokens(40, V, 9);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params;
  for (int i = 0; i < 48; ++i) {
    std::vector<int32_t> p = i % 2 ? shared : std::vector<int32_t>{};
    const auto tail = SomeTokens(10 + (i * 7) % 50, V, i);
    p.insert(p.end(), tail.begin(), tail.end());
    RequestParams rp;
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    rp.max_tokens = i % 3 == 0 ? 0 : 40;
    rp.prompt_logits_from = i % 3 == 2 ? -1 : (i * 5) % static_cast<int32_t>(p.size());
    prompts.push_back(p);
    params.push_back(rp);
  }
  std::vector<Result> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineOptions o;
    o.max_num_seqs = 1;
    o.prefix_caching = false;
    alone.push_back(RunAll(*f.Make(o), {prompts[i]}, {params[i]}, V)[0]);
  }
  // KV per token: 2 layers x 2 (K, V) x 32 floats = 512 B; 1 MiB = 128 blocks
  // of 16, about half the demand (48 requests of up to 150 tokens): preemption
  // happens.
  EngineOptions o;
  o.kv_cache_mb = 1;
  o.max_batched_tokens = 128;
  auto e = f.Make(o);
  // Fill the prefix cache with the shared prefix first.
  RunAll(*e, {shared}, {ScorePrompt(0)}, V);
  auto together = RunAll(*e, prompts, params, V);
  EXPECT_GT(e->Stats().num_preemptions, 0u);
  EXPECT_GT(e->Stats().prefix_cache_hits, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << i;
    EXPECT_EQ(together[i].finish, alone[i].finish) << i;
    ASSERT_EQ(together[i].prompt_logits.size(), alone[i].prompt_logits.size()) << i;
    if (params[i].prompt_logits_from >= 0) {
      EXPECT_EQ(together[i].prompt_logits.size(), (prompts[i].size() - params[i].prompt_logits_from) * V) << i;
      EXPECT_LE(together[i].cached, params[i].prompt_logits_from) << i;
    }
    if (!alone[i].prompt_logits.empty()) {  // (memcmp must not see the null data() of empty vectors)
      EXPECT_EQ(std::memcmp(together[i].prompt_logits.data(), alone[i].prompt_logits.data(),
                            alone[i].prompt_logits.size() * 4), 0) << i;
    }
  }
}

TEST(PromptLogits, PromptOnlyRules) {
  ModelConfig c = testing::TinyConfig();
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 1, "pl_rules.gguf"));
  auto e = f.Make(EngineOptions{});
  RequestParams none;
  none.max_tokens = 0;
  EXPECT_EQ(e->Add({1, 2, 3}, none).status().code(), StatusCode::kInvalidArgument);  // nothing to produce
  EXPECT_EQ(e->Add({1, 2, 3}, ScorePrompt(3)).status().code(), StatusCode::kInvalidArgument);  // past the prompt
  auto r = RunAll(*e, {{1, 2, 3}}, {ScorePrompt(2)}, c.n_vocab);
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
  EXPECT_TRUE(r[0].tokens.empty());
  EXPECT_EQ(r[0].prompt_logits.size(), static_cast<size_t>(c.n_vocab));
}

// prompt_logprobs: each prompt token after the first, its log-softmax
// under the row before it, and the top tokens; the prefix cache serves none
// of the prompt.
TEST(PromptLogits, PromptLogprobsFollowTheRows) {
  ModelConfig c = testing::TinyConfig();
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 3, "pl_logprobs.gguf"));
  const int32_t V = c.n_vocab;
  auto e = f.Make(EngineOptions{});
  const auto prompt = SomeTokens(37, V, 4);
  RunAll(*e, {prompt}, {ScorePrompt(0)}, V);  // fills the prefix cache
  RequestParams rp = ScorePrompt(0);
  rp.prompt_logprobs = 3;
  auto id = e->Add(prompt, rp);
  ASSERT_TRUE(id.ok());
  std::vector<float> rows;
  std::vector<TokenLogprob> lps;
  int32_t cached = -1;
  while (e->HasWork()) {
    for (const RequestOutput& o : e->Step()) {
      rows.insert(rows.end(), o.prompt_logits.begin(), o.prompt_logits.end());
      lps.insert(lps.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
      if (o.finished) cached = o.cached_tokens;
    }
  }
  EXPECT_EQ(cached, 0);
  ASSERT_EQ(rows.size(), prompt.size() * V);
  ASSERT_EQ(lps.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const float* row = rows.data() + i * V;
    double mx = row[0], z = 0;
    for (int32_t v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (int32_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
    EXPECT_EQ(lps[i].token, prompt[i + 1]);
    EXPECT_NEAR(lps[i].logprob, row[prompt[i + 1]] - mx - std::log(z), 1e-5) << i;
    int32_t above = 0;  // vLLM's rank: 1 + the tokens more likely
    for (int32_t v = 0; v < V; ++v) above += row[v] > row[prompt[i + 1]] ? 1 : 0;
    EXPECT_EQ(lps[i].rank, above + 1) << i;
    ASSERT_EQ(lps[i].top.size(), 3u);
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
    EXPECT_EQ(lps[i].top[0].first, best);
    EXPECT_GE(lps[i].top[0].second, lps[i].top[1].second);
  }
  rp.prompt_logprobs = 1001;  // the engine allows 1000 (the server: 20 on OpenAI endpoints)
  EXPECT_EQ(e->Add(prompt, rp).status().code(), StatusCode::kInvalidArgument);
}

TEST(PromptLogits, ContextEndAndMaxTokens) {
  ModelConfig c = testing::TinyConfig();
  Fixture f(testing::WriteTinyModel(c, DType::kF32, 1, "ctx.gguf"));
  EngineOptions o;
  o.max_model_len = 10;
  RequestParams greedy;
  greedy.sampling.temperature = 0;
  greedy.ignore_eos = true;
  auto r = RunAll(*f.Make(o), {{1, 5, 6}}, {greedy}, c.n_vocab);
  EXPECT_EQ(r[0].tokens.size(), 7u);  // to the context end
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
  greedy.max_tokens = 5;
  r = RunAll(*f.Make(EngineOptions{}), {{1, 5}}, {greedy}, c.n_vocab);
  EXPECT_EQ(r[0].tokens.size(), 5u);
  auto e = f.Make(o);
  EXPECT_EQ(e->Add({1, 99999}, greedy).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Add(SomeTokens(11, c.n_vocab), greedy).status().code(), StatusCode::kOutOfRange);
}

TEST(PromptLogits, Stories260KGreedyMatchesLlama2c) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  const std::string dir = testing::SharedDir() + "/models/stories260K";
  Fixture f(dir + "/stories260K.gguf");
  auto g = GgufFile::Open(dir + "/stories260K.gguf");
  ASSERT_TRUE(g.ok());
  auto tok = TokenizerFromGguf(**g);
  ASSERT_TRUE(tok.ok());
  f.tok = std::move(tok).value();
  RequestParams greedy;
  greedy.sampling.temperature = 0;
  greedy.max_tokens = 20;
  auto r = RunAll(*f.Make(EngineOptions{}), {{1}}, {greedy}, f.model->config.n_vocab);
  // First generated ids listed in ../shared/models/stories260K/SOURCE.txt.
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                               426, 338, 401, 396, 267, 337}));
}

}  // namespace
}  // namespace infera::prompt_logits_test
