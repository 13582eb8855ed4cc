// The architecture registry: every Arch has one entry, names are unique and
// found by every spelling, and configs take the family's properties from it.
#include "model/arch/registry.h"

#include <set>

#include "model/random_model.h"

#include <gtest/gtest.h>

namespace infera::arch_registry_test {
namespace {

TEST(ArchRegistryTest, EveryFamilyOnceAndFoundByEveryName) {
  std::set<std::string> names, hf;
  std::set<int> archs;
  for (const ArchInfo* a : AllArchs()) {
    EXPECT_TRUE(names.insert(a->name).second) << a->name;
    EXPECT_TRUE(archs.insert(static_cast<int>(a->arch)).second) << a->name;
    EXPECT_EQ(&GetArch(a->arch), a);
    EXPECT_EQ(FindArchByGguf(a->name), a);
    EXPECT_EQ(std::string(ArchName(a->arch)), a->name);
    for (const auto& n : a->hf_architectures) {
      EXPECT_TRUE(hf.insert(n).second) << n;
      EXPECT_EQ(FindArchByHf(n), a) << n;
    }
    for (const auto& n : a->hf_model_types) EXPECT_EQ(FindArchByHf(n), a) << n;
  }
  for (Arch arch : {Arch::kLlama, Arch::kMistral, Arch::kQwen2, Arch::kQwen3, Arch::kGranite, Arch::kPhi3,
                    Arch::kGemma2, Arch::kGemma3, Arch::kOlmo2, Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe}) {
    EXPECT_TRUE(archs.count(static_cast<int>(arch)));
  }
  EXPECT_EQ(FindArchByGguf("mamba"), nullptr);
  EXPECT_EQ(FindArchByHf("GPT2LMHeadModel"), nullptr);
  EXPECT_EQ(SupportedArchNames(), "llama, mistral, qwen2, qwen3, granite, phi3, gemma2, gemma3, olmo2, mixtral, qwen2moe, qwen3moe");
}

TEST(ArchRegistryTest, HfConfigsTakeTheFamilysProperties) {
  const std::string base = R"("vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
                              "intermediate_size": 24, "sliding_window": 8)";
  auto config = [&](const std::string& head) {
    auto c = ConfigFromHfJson("{" + head + ", " + base + "}", "config.json");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : ModelConfig{};
  };
  const ModelConfig llama = config(R"("architectures": ["LlamaForCausalLM"])");
  EXPECT_EQ(llama.arch, Arch::kLlama);
  EXPECT_EQ(llama.sliding_window, 0);
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_EQ(config(R"("model_type": "mistral")").sliding_window, 8);
  const ModelConfig qwen = config(R"("model_type": "qwen2")");
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(qwen.sliding_window, 0);
  EXPECT_EQ(config(R"("model_type": "qwen2", "use_sliding_window": true)").sliding_window, 8);
  EXPECT_TRUE(config(R"("model_type": "llama", "attention_bias": true)").qkv_bias);
  auto gpt2 = ConfigFromHfJson("{\"model_type\": \"gpt2\", " + base + "}", "config.json");
  ASSERT_FALSE(gpt2.ok());
  EXPECT_NE(gpt2.status().message().find("unsupported architecture 'gpt2' (supported: llama, mistral, qwen2, qwen3, granite, phi3, gemma2, gemma3, olmo2, mixtral, qwen2moe, qwen3moe)"),
            std::string::npos);
}

// The random bench shapes: g2b takes the Gemma 2 family's properties and
// its own head width (2304 / 8 heads would be 288; Gemma 2 2B's is 256).
TEST(ArchRegistryTest, RandomShapesTakeTheirFamilysProperties) {
  auto g = RandomModelShape("g2b");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->arch, Arch::kGemma2);
  EXPECT_EQ(g->activation, Activation::kGeluTanh);
  EXPECT_TRUE(g->post_norm);
  EXPECT_EQ(g->head_dim, 256);
  EXPECT_EQ(g->rope_dim, 256);
  EXPECT_EQ(g->swa_period, 2);
  auto m = RandomModelShape("m1b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->arch, Arch::kLlama);
  EXPECT_EQ(m->head_dim, 64);
  auto bad = RandomModelShape("g3b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("g2b"), std::string::npos) << bad.status().message();
}

// The random models' vocabulary: every piece once (a duplicate would leave
// one of its ids unreachable by the tokenizer), ids in range at any size.
TEST(ArchRegistryTest, SyntheticVocabHasEveryPieceOnce) {
  for (int n : {300, 400, 32000}) {
    const Vocab v = MakeSyntheticVocab(n);
    ASSERT_EQ(v.size(), n);
    std::set<std::string> seen(v.pieces.begin(), v.pieces.end());
    EXPECT_EQ(static_cast<int>(seen.size()), n) << "vocabulary of " << n;
    for (int32_t id = 0; id < n; ++id) EXPECT_EQ(v.Find(v.pieces[id]), id) << v.pieces[id];
  }
}

}  // namespace
}  // namespace infera::arch_registry_test
