// Speculative decoding: n-gram drafting, and the engine's verification of
// drafts, whose outputs must be exactly those of plain decoding (greedy and
// seeded sampling, alone and batched, under preemption), with every KV block
// back in the pool at the end.
#include <map>

#include <gtest/gtest.h>

#include "engine/ngram_draft.h"
#include "engine/spec_policy.h"
#include "infera/engine.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "unit/test_util.h"

namespace infera::speculative_test {
namespace {

using Tokens = std::vector<int32_t>;

TEST(NgramDraft, CopiesWhatFollowedTheLatestOccurrence) {
  // The latest earlier occurrence of [1, 2] is at 3: 7 follows, then the copy
  // runs on through the sequence's end into the draft.
  EXPECT_EQ(NgramDraft({1, 2, 9, 1, 2, 7, 1, 2}, 2, 2, 4), (Tokens{7, 1, 2, 7}));
  EXPECT_EQ(NgramDraft({1, 2, 3, 4, 1, 2}, 1, 3, 6), (Tokens{3, 4, 1, 2, 3, 4}));
  // Longer n-grams first: [5, 1, 2] occurred at 0 (8 followed); [1, 2] alone
  // last occurred at 5 (9 followed).
  const Tokens t = {5, 1, 2, 8, 6, 1, 2, 9, 5, 1, 2};
  EXPECT_EQ(NgramDraft(t, 2, 3, 1), (Tokens{8}));
  EXPECT_EQ(NgramDraft(t, 2, 2, 1), (Tokens{9}));
  EXPECT_EQ(NgramDraft({7, 7}, 1, 4, 3), (Tokens{7, 7, 7}));  // a repeat repeats
  EXPECT_TRUE(NgramDraft({1, 2, 3, 4}, 1, 3, 5).empty());     // nothing occurred before
  EXPECT_TRUE(NgramDraft({1, 2, 1, 2}, 3, 4, 5).empty());     // n-grams too short
  EXPECT_TRUE(NgramDraft({1, 2, 1, 2}, 1, 2, 0).empty());
  EXPECT_TRUE(NgramDraft({}, 1, 2, 4).empty());
}

TEST(SpecPolicy, DraftsWhatPays) {
  // Cheap extra tokens (memory-bound decode) and likely drafts: draft long.
  EXPECT_EQ(ChooseDraftLength(0.95, 0.05, 8), 8);
  // Expensive extra tokens: short drafts, or none when they rarely pass.
  EXPECT_EQ(ChooseDraftLength(0.5, 0.25, 8), 1);
  EXPECT_EQ(ChooseDraftLength(0.15, 0.25, 8), 0);
  EXPECT_EQ(ChooseDraftLength(0.99, 1.5, 8), 0);  // a token costs more than a step
  EXPECT_EQ(ChooseDraftLength(1.0, 0.0, 5), 5);
  EXPECT_EQ(ChooseDraftLength(0.9, 0.1, 0), 0);
  // E(k) / (1 + r k) by hand, alpha 0.8, r 0.2: k = 2: 2.44 / 1.4 = 1.743;
  // k = 3: 2.952 / 1.6 = 1.845; k = 4: 3.3616 / 1.8 = 1.868; k = 5: 3.689 / 2 = 1.845.
  EXPECT_EQ(ChooseDraftLength(0.8, 0.2, 8), 4);
}

TEST(SpecPolicy, AcceptanceTracksAndForgets) {
  AcceptanceEstimate a;
  EXPECT_DOUBLE_EQ(a.alpha(), 0.5);
  for (int i = 0; i < 30; ++i) a.Verified(8, 8);
  EXPECT_GT(a.alpha(), 0.95);
  for (int i = 0; i < 60; ++i) a.Verified(4, 0);
  EXPECT_LT(a.alpha(), 0.1);
  for (int i = 0; i < 100; ++i) a.Forget();  // not drafting: back to the prior, to try again
  EXPECT_NEAR(a.alpha(), 0.5, 0.01);
}

TEST(SpecPolicy, StepCostFromStepTimes) {
  StepCostModel m;
  EXPECT_DOUBLE_EQ(m.marginal_ratio(), 0.25);  // prior
  m.Observe(1, 0.010);
  m.Observe(5, 0.014);  // 1 ms per extra token: 0.1 of a step; one step moves the prior a little
  EXPECT_GT(m.marginal_ratio(), 0.2);
  EXPECT_LT(m.marginal_ratio(), 0.25);
  for (int i = 0; i < 200; ++i) m.Observe(5, 0.014);
  EXPECT_NEAR(m.marginal_ratio(), 0.1, 1e-6);
  for (int i = 0; i < 200; ++i) m.Observe(3, 0.030);  // 10 ms per extra token
  EXPECT_NEAR(m.marginal_ratio(), 1.0, 1e-3);
}

TEST(SpecPolicy, DraftModelCostCountsPerDraftedPosition) {
  StepCostModel m;
  m.ObserveDraft(4, 0.004);
  EXPECT_DOUBLE_EQ(m.draft_ratio(), 0);  // no one-token step seen yet
  m.Observe(1, 0.010);
  EXPECT_NEAR(m.draft_ratio(), 0.1, 1e-9);  // 1 ms per position, 10 ms a step
  for (int i = 0; i < 200; ++i) m.ObserveDraft(2, 0.006);
  EXPECT_NEAR(m.draft_ratio(), 0.3, 1e-6);
  // A draft that is right 70 % of the time: worth one token when only the
  // verification costs (r 0.25), not when the draft model costs 0.3 more.
  EXPECT_EQ(ChooseDraftLength(0.7, 0.25, 8), 2);
  EXPECT_EQ(ChooseDraftLength(0.7, 0.25 + m.draft_ratio(), 8), 1);
  EXPECT_EQ(ChooseDraftLength(0.5, 0.25 + m.draft_ratio(), 8), 0);
}

TEST(SpecPolicy, ProbesBackOffWhileDraftingDoesNotPay) {
  ProbeSchedule p;
  // Steps (from the start, or the previous probe) to each probe.
  auto steps_to_probe = [&] {
    for (int32_t i = 1; i <= 10000; ++i) {
      const int32_t n = p.Next(0);
      if (n != 0) {
        EXPECT_EQ(n, 1);
        EXPECT_TRUE(p.probing());
        return i;
      }
      EXPECT_FALSE(p.probing());
    }
    return -1;
  };
  EXPECT_EQ(steps_to_probe(), 32);
  EXPECT_EQ(steps_to_probe(), 64);
  EXPECT_EQ(steps_to_probe(), 128);
  EXPECT_EQ(steps_to_probe(), 256);
  EXPECT_EQ(steps_to_probe(), 512);
  EXPECT_EQ(steps_to_probe(), 512);  // capped
  for (int i = 0; i < 100; ++i) p.Next(0);
  // Drafting pays again: the chosen length, not a probe, and the interval
  // starts again.
  EXPECT_EQ(p.Next(3), 3);
  EXPECT_FALSE(p.probing());
  EXPECT_EQ(steps_to_probe(), 32);
}

struct Outputs {
  std::map<size_t, Tokens> tokens;
  std::map<size_t, std::vector<float>> logprobs;
  std::map<size_t, FinishReason> finish;
  bool operator==(const Outputs& o) const { return tokens == o.tokens && logprobs == o.logprobs && finish == o.finish; }
};

Outputs RunAll(Engine& e, const std::vector<Tokens>& prompts, const std::vector<RequestParams>& params) {
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Add(prompts[i], params[i]);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (id.ok()) idx[*id] = i;
  }
  Outputs run;
  int guard = 0;
  while (e.HasWork() && ++guard < 100000) {
    for (const RequestOutput& o : e.Step()) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      const size_t i = idx.at(o.id);
      run.tokens[i].insert(run.tokens[i].end(), o.tokens.begin(), o.tokens.end());
      for (const TokenLogprob& lp : o.logprobs) run.logprobs[i].push_back(lp.logprob);
      if (o.finished) run.finish[i] = o.finish_reason;
    }
  }
  return run;
}

// Prompts that repeat themselves (drafts get found) and that do not.
std::vector<Tokens> Prompts() {
  std::vector<Tokens> out;
  for (int i = 0; i < 48; ++i) {
    Tokens seg;
    for (int j = 0; j < 5 + i % 7; ++j) seg.push_back((j * 31 + i * 17 + 3) % 300);
    Tokens p;
    for (int r = 0; r < 1 + i % 4; ++r) p.insert(p.end(), seg.begin(), seg.end());
    out.push_back(p);
  }
  return out;
}

std::vector<RequestParams> Params(int variant) {
  std::vector<RequestParams> out;
  for (int i = 0; i < 48; ++i) {
    RequestParams p;
    p.max_tokens = 40 + i % 12 * 6;
    p.ignore_eos = true;
    if (variant == 0) {
      p.sampling.temperature = 0;
    } else {  // seeded sampling with penalties: the history must be exact too
      p.sampling.temperature = 0.9f;
      p.sampling.top_k = 40;
      p.sampling.seed = 1000 + i;
      p.sampling.has_seed = true;
      p.sampling.repetition_penalty = 1.1f;
      p.logprobs = 0;
    }
    out.push_back(p);
  }
  return out;
}

// An engine on `model` with 2 threads (a failure fails the test).
std::unique_ptr<Engine> MakeEngine(const Model& model, const KernelTable& kernels, EngineOptions o) {
  o.threads = 2;
  auto e = Engine::Create(model, nullptr, kernels, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

class SpeculativeTest : public ::testing::TestWithParam<DType> {};

TEST_P(SpeculativeTest, OutputsEqualPlainDecoding) {
  ModelConfig c = testing::TinyConfig();
  c.n_ctx_train = 512;
  auto m = LoadModel(testing::WriteTinyModel(c, GetParam(), 7, std::string("spec-") + DTypeName(GetParam()) + ".gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const KernelTable kernels = MakeBestKernelTable();
  auto make = [&](const EngineOptions& o) { return MakeEngine(**m, kernels, o); };
  const std::vector<Tokens> prompts = Prompts();
  for (int variant : {0, 1}) {
    const std::vector<RequestParams> params = Params(variant);
    EngineOptions plain;
    plain.kv_cache_mb = 4;
    plain.max_batched_tokens = 64;
    auto e0 = make(plain);
    const Outputs want = RunAll(*e0, prompts, params);
    // Drafting for every sequence of a full batch; for one at a time; and
    // under preemption (a pool far below the demand).
    for (int config = 0; config < 3; ++config) {
      EngineOptions o = plain;
      o.spec = "ngram";
      o.spec_ngram_min = 1;
      o.spec_draft_max = config == 1 ? 3 : 8;
      o.spec_max_seqs = 64;
      if (config == 1) o.max_num_seqs = 1;
      if (config == 2) o.kv_cache_mb = 1, o.kv_block_size = 4, o.max_batched_tokens = 256;
      auto e = make(o);
      const Outputs got = RunAll(*e, prompts, params);
      EXPECT_TRUE(got == want) << "variant " << variant << " config " << config;
      const EngineStats st = e->Stats();
      EXPECT_GT(st.spec_draft_tokens, 0u) << "config " << config;
      EXPECT_LE(st.spec_accepted_tokens, st.spec_draft_tokens);
      EXPECT_EQ(st.kv_blocks_used, 0);
      EXPECT_EQ(st.num_running + st.num_waiting, 0);
      if (config == 2) {
        EXPECT_GT(st.num_preemptions, 0u) << st.kv_blocks_total << " blocks of " << st.kv_block_size;
      }
    }
  }
}

// A draft model: the same model as draft accepts every drafted token (its
// cache follows the sequence exactly); another model's drafts are mostly
// rejected. Outputs equal plain decoding either way, alone and batched, and
// every block of both caches comes back.
TEST_P(SpeculativeTest, DraftModelOutputsEqualPlainDecoding) {
  ModelConfig c = testing::TinyConfig();
  c.n_ctx_train = 512;
  const std::string name = std::string("spec-draft-") + DTypeName(GetParam());
  auto m = LoadModel(testing::WriteTinyModel(c, GetParam(), 7, name + ".gguf"));
  auto other = LoadModel(testing::WriteTinyModel(c, GetParam(), 8, name + "-other.gguf"));
  ASSERT_TRUE(m.ok() && other.ok());
  const KernelTable kernels = MakeBestKernelTable();
  auto make = [&](const EngineOptions& o) { return MakeEngine(**m, kernels, o); };
  std::vector<Tokens> prompts = Prompts();
  prompts.resize(12);
  for (int variant : {0, 1}) {
    std::vector<RequestParams> params = Params(variant);
    params.resize(12);
    EngineOptions plain;
    plain.kv_cache_mb = 4;
    plain.max_batched_tokens = 64;
    auto e0 = make(plain);
    const Outputs want = RunAll(*e0, prompts, params);
    for (const Model* draft : {m->get(), other->get()}) {
      for (int32_t seqs : {1, 64}) {
        EngineOptions o = plain;
        o.spec = "draft";
        o.draft_model = draft;
        o.spec_p_min = 0;
        o.spec_adaptive = false;
        o.spec_draft_max = 5;
        o.spec_max_seqs = 64;
        o.max_num_seqs = seqs;
        auto e = make(o);
        const Outputs got = RunAll(*e, prompts, params);
        EXPECT_TRUE(got == want) << "variant " << variant << " seqs " << seqs;
        const EngineStats st = e->Stats();
        EXPECT_GT(st.spec_draft_tokens, 0u);
        if (draft == m->get() && variant == 0) {
          EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens) << "seqs " << seqs;
        }
        if (draft == other->get()) {
          EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
        }
        EXPECT_EQ(st.kv_blocks_used, 0);
      }
    }
    if (variant != 0) continue;
    // A draft context (--draft-ctx): the draft model starts on a sequence's
    // last few tokens, and again after falling behind (the adaptive policy
    // pausing a draft model that is mostly wrong, then probing). Outputs
    // equal plain decoding and every block comes back; the model as its own
    // draft now sees less than the target and is sometimes wrong, unless the
    // context holds the whole sequence.
    struct Case {
      const Model* draft;
      int32_t context;
      bool adaptive;
    };
    // Context 0 with the adaptive policy: the probes' own catch-up limit
    // (kSpecProbeCatchUp).
    for (const Case& cs : {Case{m->get(), 4, false}, Case{m->get(), 1000, false}, Case{other->get(), 4, true},
                           Case{m->get(), 4, true}, Case{other->get(), 0, true}}) {
      EngineOptions o = plain;
      o.spec = "draft";
      o.draft_model = cs.draft;
      o.spec_p_min = 0;
      o.spec_adaptive = cs.adaptive;
      o.spec_draft_max = 5;
      o.spec_draft_context = cs.context;
      auto e = make(o);
      const Outputs got = RunAll(*e, prompts, params);
      const std::string what = "context " + std::to_string(cs.context) + (cs.draft == m->get() ? " self" : " other") +
                               (cs.adaptive ? " adaptive" : "");
      EXPECT_TRUE(got == want) << what;
      const EngineStats st = e->Stats();
      EXPECT_GT(st.spec_draft_tokens, 0u) << what;
      if (cs.draft == m->get() && !cs.adaptive) {
        if (cs.context == 4) {
          EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens) << what;
        } else {
          EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens) << what;
        }
      }
      EXPECT_EQ(st.kv_blocks_used, 0) << what;
    }
  }
  EngineOptions bad_context;
  bad_context.spec = "draft";
  bad_context.draft_model = m->get();
  bad_context.spec_draft_context = -1;
  EXPECT_EQ(Engine::Create(**m, nullptr, kernels, bad_context).status().code(), StatusCode::kInvalidArgument);
  // A draft model of another vocabulary is refused.
  ModelConfig small = c;
  small.n_vocab = 300;
  auto bad = LoadModel(testing::WriteTinyModel(small, DType::kF32, 9, name + "-vocab.gguf"));
  ASSERT_TRUE(bad.ok());
  EngineOptions o;
  o.threads = 1;
  o.kv_cache_mb = 1;
  o.spec = "draft";
  o.draft_model = bad->get();
  EXPECT_EQ(Engine::Create(**m, nullptr, kernels, o).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Types, SpeculativeTest, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A runner that predicts "token * 7 + 3 mod V": with the cycle in the prompt,
// every draft is right, so each step yields draft_max + 1 tokens.
class CycleRunner : public ModelRunner {
 public:
  explicit CycleRunner(int32_t n_vocab) : n_vocab_(n_vocab) {}
  Status Forward(const ForwardBatch& b, KvStorage&, std::vector<float>* logits) override {
    logits->assign(b.logit_rows.size() * n_vocab_, 0.0f);
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      (*logits)[r * n_vocab_ + Next(b.tokens[b.logit_rows[r]])] = 10.0f;
    }
    return Status::Ok();
  }
  int32_t Next(int32_t t) const { return (t * 7 + 3) % n_vocab_; }

 private:
  int32_t n_vocab_;
};

TEST(Speculative, RightDraftsCutTheSteps) {
  ModelConfig c = testing::TinyConfig();
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 3, "spec-fake.gguf"));
  ASSERT_TRUE(m.ok());
  const KernelTable kernels = MakeBestKernelTable();
  CycleRunner cycle(c.n_vocab);
  Tokens prompt = {5};
  for (int i = 0; i < 40; ++i) prompt.push_back(cycle.Next(prompt.back()));
  Tokens want;
  for (int32_t t = prompt.back(); want.size() < 64;) want.push_back(t = cycle.Next(t));
  EngineOptions o;
  o.threads = 1;
  o.kv_cache_mb = 2;
  o.spec = "ngram";
  o.spec_draft_max = 7;
  o.spec_adaptive = false;
  auto e = Engine::Create(**m, nullptr, kernels, o, [&](ThreadPool&) { return std::make_unique<CycleRunner>(c.n_vocab); });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = 64;
  p.ignore_eos = true;
  const Outputs run = RunAll(**e, {prompt}, {p});
  EXPECT_EQ(run.tokens.at(0), want);
  const EngineStats st = (*e)->Stats();
  // One prefill step (and its token), then 8 tokens a step: 63 / 8 -> 8 steps.
  EXPECT_EQ(st.steps, 9u);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
  EXPECT_EQ(st.spec_accepted_tokens, 63u - 8u);
}

TEST(Speculative, RefusesBadOptions) {
  ModelConfig c = testing::TinyConfig();
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 3, "spec-opts.gguf"));
  ASSERT_TRUE(m.ok());
  const KernelTable kernels = MakeBestKernelTable();
  auto refused = [&](auto set) {
    EngineOptions o;
    o.threads = 1;
    o.kv_cache_mb = 1;
    set(o);
    return Engine::Create(**m, nullptr, kernels, o).status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec = "draft"; }));  // without a draft model
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec = "lookahead"; }));
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec_p_min = 1.5f; }));
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec_draft_max = 0; }));
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec_draft_min = 9; }));
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec_ngram_min = 3, o.spec_ngram_max = 2; }));
  EXPECT_TRUE(refused([](EngineOptions& o) { o.spec_max_seqs = 0; }));
  EXPECT_FALSE(refused([](EngineOptions& o) { o.spec = "ngram"; }));
}

}  // namespace
}  // namespace infera::speculative_test
