// Structured pruning: the smaller dense model (heads, KV groups, FFN
// channels removed; per-layer widths) gives the logits of the original model
// with the same heads' and channels' output columns zeroed, in every family
// that has the structure; the others are refused with a reason.
#include <random>

#include <gtest/gtest.h>

#include "infera/engine.h"
#include "kernels/kernels.h"
#include "model/arch/registry.h"
#include "model/loader.h"
#include "prune/model_pruning.h"
#include "unit/test_util.h"

namespace infera::prune_structured_test {
namespace {

std::vector<float> PromptLogits(const Model& m, const KernelTable& k, const std::vector<int32_t>& toks) {
  EngineOptions o;
  o.threads = 2;
  o.max_num_seqs = 1;
  o.max_batched_tokens = 64;
  o.max_model_len = static_cast<int32_t>(toks.size());
  o.prefix_caching = false;
  auto e = Engine::Create(m, nullptr, k, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  RequestParams p;
  p.max_tokens = 0;
  p.prompt_logits_from = 0;
  EXPECT_TRUE((*e)->Add(toks, p).ok());
  std::vector<float> out;
  while ((*e)->HasWork()) {
    for (const RequestOutput& r : (*e)->Step()) {
      EXPECT_NE(r.finish_reason, FinishReason::kError) << r.error;
      out.insert(out.end(), r.prompt_logits.begin(), r.prompt_logits.end());
    }
  }
  return out;
}

std::unique_ptr<Model> Load(const std::string& path) {
  auto m = LoadModel(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  auto model = std::move(m).value();
  EXPECT_TRUE(prune::MakeLayerMatricesF32(model.get()).ok());
  return model;
}

// Random positive calibration statistics of the right widths.
void FakeStats(const ModelConfig& c, std::mt19937& rng, std::vector<std::vector<double>>* attn,
               std::vector<std::vector<double>>* ffn) {
  std::uniform_real_distribution<double> u(0.1, 10.0);
  attn->assign(c.n_layer, {});
  ffn->assign(c.n_layer, {});
  for (int l = 0; l < c.n_layer; ++l) {
    for (int i = 0; i < c.n_head_at(l) * c.head_dim; ++i) (*attn)[l].push_back(u(rng));
    for (int i = 0; i < c.n_ff_at(l); ++i) (*ffn)[l].push_back(u(rng));
  }
}

struct Case {
  double heads, ffn;
};

TEST(PruneStructuredTest, SlicedModelEqualsZeroedModelInEveryFamily) {
  const KernelTable kernels = MakeBestKernelTable();
  std::vector<int32_t> toks;
  for (int i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % 320);
  int tested = 0;
  for (const ArchInfo* arch : AllArchs()) {
    ModelConfig c = testing::TinyConfig();
    ApplyArchShape(*arch, &c);
    c.n_head = 8;
    c.n_head_kv = 4;  // GQA groups of two
    c.n_ff = 128;
    c.n_ctx_train = 256;
    if (c.moe()) c.n_ff_exp = 32;
    const Status supported = prune::CheckStructuredSupported(c, true, !c.moe());
    if (!supported.ok()) {
      EXPECT_TRUE(c.fused_qkv || c.fused_gate_up || c.qk_norm == QkNorm::kFull) << arch->name << supported.ToString();
      EXPECT_FALSE(supported.message().empty());
      continue;
    }
    const std::string path = testing::WriteTinyModel(c, DType::kF32, 5, std::string("structured-") + arch->name + ".gguf");
    // KV groups (0.5 of 8 heads: 4 KV groups x 1 or 2 x 2), query heads
    // within groups, channels only, and both.
    for (const Case& k : {Case{0.5, 0.0}, Case{0.25, 0.0}, Case{0.75, 0.0}, Case{0.0, 0.3}, Case{0.25, 0.25}}) {
      if (c.moe() && k.ffn > 0) continue;
      SCOPED_TRACE(std::string(arch->name) + " heads " + std::to_string(k.heads) + " ffn " + std::to_string(k.ffn));
      auto sliced = Load(path), zeroed = Load(path);
      std::mt19937 rng(17);
      std::vector<std::vector<double>> attn, ffn;
      FakeStats(sliced->config, rng, &attn, &ffn);
      if (k.heads == 0) attn.clear();
      if (k.ffn == 0) ffn.clear();
      auto plan = prune::PlanStructured(*sliced, attn, ffn, k.heads, k.ffn);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_TRUE(prune::ApplyStructured(sliced.get(), *plan).ok());
      prune::ZeroStructured(zeroed.get(), *plan);
      const ModelConfig& s = sliced->config;
      for (int l = 0; l < s.n_layer; ++l) {
        if (k.heads > 0) {
          EXPECT_LE(s.n_head_at(l), 8 - static_cast<int>(std::lround(k.heads * 8)));
          EXPECT_EQ(s.n_head_at(l) % s.n_head_kv_at(l), 0);
        }
        if (k.ffn > 0) {
          EXPECT_EQ(s.n_ff_at(l), 96);  // 128 - 32 or 38, rounded to a multiple of 32
        }
      }
      const auto a = PromptLogits(*sliced, kernels, toks), b = PromptLogits(*zeroed, kernels, toks);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      double max_diff = 0;
      for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(a[i]) - b[i]));
      EXPECT_LE(max_diff, 1e-5);
      // ... and pruning changed the model (nothing kept by accident).
      auto dense = Load(path);
      EXPECT_NE(PromptLogits(*dense, kernels, toks), a);
      ++tested;
    }
  }
  EXPECT_GE(tested, 20);
}

TEST(PruneStructuredTest, RefusesWhatAModelDoesNotHave) {
  ModelConfig c = testing::TinyConfig();
  c.n_head = 1;
  c.n_head_kv = 1;
  EXPECT_FALSE(prune::CheckStructuredSupported(c, true, false).ok());
  EXPECT_TRUE(prune::CheckStructuredSupported(c, false, true).ok());
  ApplyArchShape(Phi3Arch(), &c);
  EXPECT_FALSE(prune::CheckStructuredSupported(c, false, true).ok());
  ModelConfig moe = testing::TinyConfig();
  ApplyArchShape(MixtralArch(), &moe);
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  const Status st = prune::CheckStructuredSupported(moe, false, true);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mixture-of-experts"), std::string::npos);
}

}  // namespace
}  // namespace infera::prune_structured_test
