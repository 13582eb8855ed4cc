// The families through the serving engine. MoE: a random Mixtral-shaped
// model (4 experts, top-2) with its experts in every weight type gives,
// batched with 12 other requests and in several chunkings, exactly the
// greedy tokens each request gives alone. Sliding windows (gemma2, gemma3,
// mistral): batched, chunked, paged and prefix-cached runs give bit-identical
// log-probabilities to isolated ones; so do per-layer widths (a pruned
// model), with f32 and int8 KV. And the engine runs on any
// ModelRunner (a fake here).
#include <map>

#include <gtest/gtest.h>

#include "infera/engine.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "model/arch/registry.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"
#include "unit/test_util.h"

namespace infera::arch_engine_test {
namespace {

ModelConfig MoeConfig() {
  ModelConfig c = testing::TinyConfig();
  c.n_embd = 256;  // rows a whole number of K-quant blocks
  c.head_dim = c.rope_dim = 64;
  c.n_ff = 256;
  c.n_expert = 4;
  c.n_expert_used = 2;
  c.n_ff_exp = 256;
  c.n_ctx_train = 1024;
  return c;
}

// Re-encodes every expert matrix of `m` as `type` (in memory, repacked).
void QuantizeExperts(Model* m, DType type) {
  ModelWeights& w = *m->weights;
  for (LayerWeights& L : w.layers) {
    for (auto* experts : {&L.exp_gate, &L.exp_up, &L.exp_down}) {
      for (WeightMatrix& x : *experts) {
        const uint64_t row = *RowBytes(type, x.n_in);
        auto& buf = w.owned.emplace_back(row * x.n_out);
        std::vector<float> f(x.n_in);
        for (int64_t r = 0; r < x.n_out; ++r) {
          DequantizeRow(x.type, x.data + r * x.row_bytes, f.data(), x.n_in);
          QuantizeRow(type, f.data(), buf.data() + r * row, x.n_in);
        }
        x.type = type;
        x.data = buf.data();
        x.row_bytes = row;
        x.packed = nullptr;
        if (GetPackFormat(type).supported) {
          w.packed.push_back(std::make_unique<PackedMatrix>(PackedMatrix::Pack(type, x.data, row, x.n_in, x.n_out)));
          x.packed = w.packed.back().get();
        }
      }
    }
  }
}

// What one request produced: its tokens and, when asked, their log-probabilities.
struct Generated {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
};

// Runs all prompts together (greedy, max_tokens each, top-`logprobs`
// log-probabilities when >= 0); returns what each one generated.
std::vector<Generated> RunGreedy(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
                                 int32_t logprobs = -1) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Add(prompts[i], p);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    idx[*id] = i;
  }
  std::vector<Generated> out(prompts.size());
  for (int guard = 0; e.HasWork() && guard < 100000; ++guard) {
    for (const RequestOutput& o : e.Step()) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      Generated& g = out[idx.at(o.id)];
      g.tokens.insert(g.tokens.end(), o.tokens.begin(), o.tokens.end());
      g.logprobs.insert(g.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> RunAll(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                         int32_t max_tokens) {
  std::vector<std::vector<int32_t>> tokens;
  for (Generated& g : RunGreedy(e, prompts, max_tokens)) tokens.push_back(std::move(g.tokens));
  return tokens;
}

// Each request's generated tokens with their log-probabilities (top 3).
std::vector<std::vector<TokenLogprob>> RunWithLogprobs(Engine& e, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<TokenLogprob>> out;
  for (Generated& g : RunGreedy(e, prompts, 6, 3)) out.push_back(std::move(g.logprobs));
  return out;
}

// An engine on 2 threads with options `o`.
std::unique_ptr<Engine> MakeEngine(const Model& m, const KernelTable& kernels, EngineOptions o) {
  o.threads = 2;
  auto e = Engine::Create(m, nullptr, kernels, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

TEST(MoeEngineTest, BatchedEqualsIsolatedForEveryExpertType) {
  const std::string path = testing::WriteTinyModel(MoeConfig(), DType::kF32, 11, "moe-f32.gguf");
  const KernelTable kernels = MakeBestKernelTable();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 13; ++i) {
    std::vector<int32_t> t(2 + (i * 7) % 23);
    for (size_t j = 0; j < t.size(); ++j) t[j] = static_cast<int32_t>((j * 31 + i * 57 + 5) % 320);
    prompts.push_back(t);
  }
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                         DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                         DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  std::vector<std::vector<int32_t>> f32_tokens;
  for (DType type : types) {
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE((*m)->config.moe());
    if (type != DType::kF32) {
      ASSERT_TRUE(CanQuantize(type)) << DTypeName(type);
      QuantizeExperts(m->get(), type);
    }
    auto make = [&](int32_t seqs, int32_t budget) {
      EngineOptions o;
      o.max_num_seqs = seqs;
      o.max_batched_tokens = budget;
      o.kv_cache_mb = 8;
      return MakeEngine(**m, kernels, o);
    };
    std::vector<std::vector<int32_t>> alone;
    for (const auto& p : prompts) {
      auto e = make(1, 512);
      alone.push_back(RunAll(*e, {p}, 5)[0]);
    }
    for (int32_t budget : {5, 64}) {
      auto e = make(16, budget);
      EXPECT_EQ(RunAll(*e, prompts, 5), alone) << DTypeName(type) << " budget " << budget;
      EXPECT_EQ(e->Stats().kv_blocks_used, 0);
    }
    if (type == DType::kF32) f32_tokens = alone;
    if (type == DType::kF16 || type == DType::kQ8_0) {
      // Close types mostly keep f32's greedy tokens (a sanity check that the
      // quantized experts compute the same function).
      int same = 0, total = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        for (size_t j = 0; j < alone[i].size(); ++j) same += alone[i][j] == f32_tokens[i][j], ++total;
      }
      EXPECT_GT(same, total * 3 / 4) << DTypeName(type);
    }
  }
}

void ExpectSameLogprobs(const std::vector<std::vector<TokenLogprob>>& a,
                        const std::vector<std::vector<TokenLogprob>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " request " << i;
    for (size_t j = 0; j < a[i].size(); ++j) {
      EXPECT_EQ(a[i][j].token, b[i][j].token) << what << " request " << i << " token " << j;
      EXPECT_EQ(a[i][j].logprob, b[i][j].logprob) << what << " request " << i << " token " << j;
      EXPECT_EQ(a[i][j].top, b[i][j].top) << what << " request " << i << " token " << j;
    }
  }
}

// Windows of 8 over 16-token KV blocks: prompts sharing a 40-token prefix,
// run alone (no prefix cache) and batched with 16-token chunks and the
// prefix cache, twice (the second time mostly from the cache).
TEST(ArchEngineTest, SlidingWindowsBatchedPagedAndCachedEqualIsolated) {
  const KernelTable kernels = MakeBestKernelTable();
  for (const ArchInfo* arch : {&Gemma2Arch(), &Gemma3Arch(), &MistralArch()}) {
    ModelConfig c = testing::TinyConfig();
    ApplyArchShape(*arch, &c);
    c.sliding_window = 8;
    c.n_ctx_train = 1024;
    if (arch->arch == Arch::kGemma2) {
      c.attn_softcap = 0.05f;  // small enough to clip the random model's scores
      c.final_softcap = 0.05f;
    }
    auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 7, std::string("window-") + arch->name + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 10; ++i) {
      std::vector<int32_t> t;
      for (int j = 0; j < 40; ++j) t.push_back((j * 29 + 3) % 320);
      for (int j = 0; j < 3 + i * 5; ++j) t.push_back((j * 13 + i * 71 + 1) % 320);
      prompts.push_back(t);
    }
    auto make = [&](int32_t seqs, int32_t budget, bool cache) {
      EngineOptions o;
      o.max_num_seqs = seqs;
      o.max_batched_tokens = budget;
      o.kv_cache_mb = 8;
      o.prefix_caching = cache;
      return MakeEngine(**m, kernels, o);
    };
    std::vector<std::vector<TokenLogprob>> alone;
    for (const auto& p : prompts) {
      auto e = make(1, 512, false);
      alone.push_back(RunWithLogprobs(*e, {p})[0]);
      ASSERT_EQ(alone.back().size(), 6u);
      ASSERT_EQ(alone.back()[0].top.size(), 3u);
    }
    // The window matters: the same model without it gives other numbers.
    {
      auto full = LoadModel(testing::WriteTinyModel(c, DType::kF32, 7, std::string("window-") + arch->name + ".gguf"));
      ASSERT_TRUE(full.ok());
      (*full)->config.sliding_window = 0;
      EngineOptions o;
      o.threads = 2;
      o.kv_cache_mb = 8;
      auto e = Engine::Create(**full, nullptr, kernels, o);
      ASSERT_TRUE(e.ok());
      const auto unwindowed = RunWithLogprobs(**e, {prompts.back()})[0];
      EXPECT_NE(unwindowed[0].logprob, alone.back()[0].logprob) << arch->name;
    }
    auto batched = make(8, 16, true);
    ExpectSameLogprobs(RunWithLogprobs(*batched, prompts), alone, std::string(arch->name) + " batched");
    ExpectSameLogprobs(RunWithLogprobs(*batched, prompts), alone, std::string(arch->name) + " cached");
    EXPECT_EQ(batched->Stats().kv_blocks_used, 0);
  }
}

// A structurally pruned model (heads, KV heads and FFN width per layer)
// through the engine, with f32 and int8 KV: batched and chunked equal
// isolated, bit for bit; its KV cache is the sum of its layers' widths.
TEST(ArchEngineTest, PerLayerWidthsBatchedEqualIsolated) {
  const KernelTable kernels = MakeBestKernelTable();
  ModelConfig c = testing::TinyConfig();
  c.n_layer = 3;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.layer_n_head = {4, 2, 3};
  c.layer_n_head_kv = {2, 1, 1};
  c.layer_n_ff = {c.n_ff, c.n_ff / 2, 24};
  c.n_ctx_train = 1024;
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 11, "pruned-widths.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config.layer_n_ff, c.layer_n_ff);
  EXPECT_EQ((*m)->config.KvHeadsPerLayer(), (std::vector<int>{2, 1, 1}));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 9; ++i) {
    std::vector<int32_t> t;
    for (int j = 0; j < 5 + i * 7; ++j) t.push_back((j * 31 + i * 17 + 2) % 320);
    prompts.push_back(t);
  }
  for (const char* kv : {"f32", "q8"}) {
    auto make = [&](int32_t seqs, int32_t budget) {
      EngineOptions o;
      o.max_num_seqs = seqs;
      o.max_batched_tokens = budget;
      o.kv_cache_mb = 4;
      o.kv_cache_type = kv;
      return MakeEngine(**m, kernels, o);
    };
    std::vector<std::vector<TokenLogprob>> alone;
    for (const auto& p : prompts) alone.push_back(RunWithLogprobs(*make(1, 512), {p})[0]);
    auto batched = make(8, 16);
    ExpectSameLogprobs(RunWithLogprobs(*batched, prompts), alone, std::string("per-layer widths, KV ") + kv);
    const EngineStats st = batched->Stats();
    EXPECT_EQ(st.kv_blocks_used, 0);
    // 4 KV heads over the layers instead of 3 x 2: two thirds of a uniform cache.
    const uint64_t per_head_slot = std::string(kv) == "f32" ? 2 * c.head_dim * 4 : 2 * (c.head_dim + 4);
    EXPECT_EQ(st.kv_cache_bytes, per_head_slot * 4 * static_cast<uint64_t>(st.kv_blocks_total) * st.kv_block_size);
  }
}

// A runner that predicts "previous token + 1": the engine's step loop,
// scheduling and sampling without a model's arithmetic.
class CountingRunner : public ModelRunner {
 public:
  explicit CountingRunner(int32_t n_vocab, int32_t* max_batch) : n_vocab_(n_vocab), max_batch_(max_batch) {}
  Status Forward(const ForwardBatch& b, KvStorage&, std::vector<float>* logits) override {
    *max_batch_ = std::max(*max_batch_, b.size());
    logits->assign(b.logit_rows.size() * n_vocab_, 0.0f);
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      (*logits)[r * n_vocab_ + (b.tokens[b.logit_rows[r]] + 1) % n_vocab_] = 10.0f;
    }
    return Status::Ok();
  }

 private:
  int32_t n_vocab_;
  int32_t* max_batch_;
};

TEST(MoeEngineTest, EngineRunsAFakeRunner) {
  ModelConfig c = testing::TinyConfig();
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 3, "fake-runner.gguf"));
  ASSERT_TRUE(m.ok());
  const KernelTable kernels = MakeBestKernelTable();
  int32_t max_batch = 0;
  EngineOptions o;
  o.threads = 1;
  o.max_batched_tokens = 16;
  o.kv_cache_mb = 2;
  auto e = Engine::Create(**m, nullptr, kernels, o, [&](ThreadPool&) {
    return std::make_unique<CountingRunner>(c.n_vocab, &max_batch);
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const auto out = RunAll(**e, {{5, 6, 7}, {100, 3}, std::vector<int32_t>(40, 9)}, 4);
  EXPECT_EQ(out[0], (std::vector<int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(out[1], (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(out[2], (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_LE(max_batch, 16);
  EXPECT_GT(max_batch, 1);
}

}  // namespace
}  // namespace infera::arch_engine_test

namespace infera::arch_engine_test {
namespace {

// Every layer sliding (Mistral v0.1-style, window 24 over 16-token blocks):
// a 40-token prompt generating 300 tokens holds at most 4 blocks at any step
// (the window, the block being filled and one ahead), against 22 without
// releasing, and gives exactly the same tokens and log-probabilities.
TEST(ArchEngineTest, SlidingWindowMemoryStopsGrowingAtTheWindow) {
  const KernelTable kernels = MakeBestKernelTable();
  ModelConfig c = testing::TinyConfig();
  ApplyArchShape(MistralArch(), &c);
  c.sliding_window = 24;
  c.n_ctx_train = 1024;
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 11, "window-memory.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> prompt;
  for (int j = 0; j < 40; ++j) prompt.push_back((j * 29 + 3) % 320);
  auto run = [&](bool release, int32_t* max_blocks) {
    EngineOptions o;
    o.threads = 2;
    o.kv_cache_mb = 8;
    o.free_outside_window = release;
    auto e = Engine::Create(**m, nullptr, kernels, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    RequestParams p;
    p.sampling.temperature = 0;
    p.max_tokens = 300;
    p.ignore_eos = true;
    p.logprobs = 2;
    EXPECT_TRUE((*e)->Add(prompt, p).ok());
    std::vector<TokenLogprob> out;
    *max_blocks = 0;
    while ((*e)->HasWork()) {
      for (const RequestOutput& o : (*e)->Step()) out.insert(out.end(), o.logprobs.begin(), o.logprobs.end());
      *max_blocks = std::max(*max_blocks, (*e)->Stats().kv_blocks_used);
    }
    EXPECT_EQ((*e)->Stats().kv_blocks_used, 0);
    return out;
  };
  int32_t bounded = 0, unbounded = 0;
  const std::vector<TokenLogprob> a = run(true, &bounded);
  const std::vector<TokenLogprob> b = run(false, &unbounded);
  EXPECT_LE(bounded, 4);
  EXPECT_GE(unbounded, 21);
  ASSERT_EQ(a.size(), 300u);
  ExpectSameLogprobs({a}, {b}, "window release");
}

}  // namespace
}  // namespace infera::arch_engine_test
