// The tensor schema: every role named once, GGUF and HF names map onto each
// other, presence follows the config, and each role fills its own member.
#include "model/tensor_schema.h"

#include "model/arch/registry.h"

#include <set>

#include <gtest/gtest.h>

namespace infera::tensor_schema_test {
namespace {

ModelConfig SmallConfig(bool qkv_bias, bool tied) {
  ModelConfig c;
  c.n_vocab = 32;
  c.n_embd = 16;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 4;
  c.rope_dim = 4;
  c.n_ff = 24;
  c.qkv_bias = qkv_bias;
  c.tied_embeddings = tied;
  return c;
}

TEST(TensorSchemaTest, NamesAreUniqueAndMapBothWays) {
  for (const ArchInfo* arch : AllArchs()) {
    ModelConfig c = SmallConfig(true, false);
    ApplyArchShape(*arch, &c);
    if (arch->arch == Arch::kMixtral || arch->arch == Arch::kQwen2Moe || arch->arch == Arch::kQwen3Moe) {
      c.n_expert = 4;
      c.n_expert_used = 2;
      c.n_ff_exp = 8;
      c.n_ff_shexp = arch->arch == Arch::kQwen2Moe ? 12 : 0;
    }
    std::set<std::string> gguf, hf;
    for (const TensorRole& r : DecoderTensorRoles()) {
      if (!RoleIsPresent(r, c)) continue;
      EXPECT_TRUE(gguf.insert(r.gguf).second) << r.gguf << " " << arch->name;
      const int layer = r.per_layer ? 11 : -1;
      const std::string hf_name = HfTensorName(r, layer, c);
      if (!hf_name.empty()) {
        EXPECT_TRUE(hf.insert(hf_name).second) << hf_name << " " << arch->name;
      }
      EXPECT_EQ(HfNameForGguf(GgufTensorName(r, layer), c), hf_name) << r.gguf << " " << arch->name;
    }
  }
  {
    // Gemma's and OLMo 2's norms: the same HF name means different roles.
    ModelConfig gemma = SmallConfig(false, true), olmo = gemma;
    ApplyArchShape(Gemma2Arch(), &gemma);
    ApplyArchShape(Olmo2Arch(), &olmo);
    EXPECT_EQ(HfNameForGguf("blk.2.ffn_norm.weight", gemma), "model.layers.2.pre_feedforward_layernorm.weight");
    EXPECT_EQ(HfNameForGguf("blk.2.post_attention_norm.weight", gemma),
              "model.layers.2.post_attention_layernorm.weight");
    EXPECT_EQ(HfNameForGguf("blk.2.post_attention_norm.weight", olmo),
              "model.layers.2.post_attention_layernorm.weight");
    EXPECT_EQ(HfNameForGguf("blk.2.ffn_norm.weight", olmo), "");
    EXPECT_EQ(HfNameForGguf("blk.2.attn_norm.weight", olmo), "");
    // MoE: the router and the stacked experts; no dense FFN.
    ModelConfig mixtral = SmallConfig(false, false), qwen = mixtral;
    ApplyArchShape(MixtralArch(), &mixtral);
    ApplyArchShape(Qwen2MoeArch(), &qwen);
    mixtral.n_expert = qwen.n_expert = 8;
    qwen.n_ff_shexp = 12;
    EXPECT_EQ(HfNameForGguf("blk.1.ffn_gate_exps.weight", mixtral), "model.layers.1.block_sparse_moe.experts.{e}.w1.weight");
    EXPECT_EQ(HfNameForGguf("blk.1.ffn_gate_inp.weight", qwen), "model.layers.1.mlp.gate.weight");
    EXPECT_EQ(HfNameForGguf("blk.1.ffn_down_shexp.weight", qwen), "model.layers.1.mlp.shared_expert.down_proj.weight");
    EXPECT_EQ(HfNameForGguf("blk.1.ffn_down_shexp.weight", mixtral), "");
    EXPECT_EQ(HfNameForGguf("blk.1.ffn_gate.weight", mixtral), "");
  }
  for (const TensorRole& r : DecoderTensorRoles()) {
    // Exactly one destination (a fused matrix: its parts).
    const int dest = (r.model_matrix != nullptr) + (r.model_vector != nullptr) + (r.layer_matrix != nullptr) +
                     (r.layer_vector != nullptr) + !r.parts.empty() + (r.layer_experts != nullptr);
    EXPECT_EQ(dest, 1) << r.gguf;
    EXPECT_EQ(r.matrix, r.model_matrix != nullptr || r.layer_matrix != nullptr || !r.parts.empty() ||
                            IsExpertRole(r))
        << r.gguf;
    EXPECT_EQ(r.per_layer, r.layer_matrix != nullptr || r.layer_vector != nullptr || !r.parts.empty() ||
                               IsExpertRole(r))
        << r.gguf;
  }
  const ModelConfig c = SmallConfig(false, false);
  EXPECT_EQ(HfNameForGguf("blk.3.attn_q.weight", c), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(HfNameForGguf("output.weight", c), "lm_head.weight");
  EXPECT_EQ(HfNameForGguf("blk.x.attn_q.weight", c), "");
  EXPECT_EQ(HfNameForGguf("blk.3.nonsense.weight", c), "");
  EXPECT_EQ(HfNameForGguf("attn_q.weight", c), "");  // a layer role needs its layer
  ModelConfig phi3 = c;
  phi3.fused_qkv = phi3.fused_gate_up = true;
  EXPECT_EQ(HfNameForGguf("blk.0.ffn_up.weight", phi3), "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(HfNameForGguf("blk.0.ffn_up.weight", c), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(HfNameForGguf("blk.0.attn_q.weight", phi3), "");
  EXPECT_EQ(GlobalTensorName(&ModelWeights::output), "output.weight");
  EXPECT_EQ(GlobalTensorName(&ModelWeights::tok_embd), "token_embd.weight");
}

TEST(TensorSchemaTest, PresenceFollowsTheConfig) {
  auto count = [](const ModelConfig& c) {
    std::set<std::string> names;
    ForEachTensor(c, [&](const TensorRole& r, int layer) { names.insert(GgufTensorName(r, layer)); });
    return names;
  };
  const auto plain = count(SmallConfig(false, false));
  const auto biased_tied = count(SmallConfig(true, true));
  // Globals: token_embd, output_norm, output and the optional rope_freqs,
  // rope_factors_long / _short; 9 per layer.
  EXPECT_EQ(plain.size(), 6u + 3u * 9u);
  EXPECT_TRUE(plain.count("output.weight"));
  EXPECT_FALSE(plain.count("blk.0.attn_q.bias"));
  EXPECT_FALSE(biased_tied.count("output.weight"));
  EXPECT_TRUE(biased_tied.count("blk.2.attn_v.bias"));
  EXPECT_EQ(biased_tied.size(), 5u + 3u * 12u);
}

TEST(TensorSchemaTest, ShapesAndDestinations) {
  const ModelConfig c = SmallConfig(true, false);
  ModelWeights w;
  w.layers.resize(c.n_layer);
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (r.matrix) {
      WeightMatrix* m = RoleMatrix(r, layer, &w);
      ASSERT_NE(m, nullptr);
      m->n_in = DimSize(c, r.n_in);
      m->n_out = DimSize(c, r.n_out);
    } else {
      RoleVector(r, layer, &w)->assign(DimSize(c, r.n_in), 0.0f);
    }
  });
  EXPECT_EQ(w.tok_embd.n_out, c.n_vocab);
  EXPECT_EQ(w.layers[1].wq.n_out, c.q_dim());
  EXPECT_EQ(w.layers[1].wk.n_out, c.kv_dim());
  EXPECT_EQ(w.layers[2].wo.n_in, c.q_dim());
  EXPECT_EQ(w.layers[2].w_down.n_in, c.n_ff);
  EXPECT_EQ(w.layers[0].bk.size(), static_cast<size_t>(c.kv_dim()));
  EXPECT_EQ(w.rope_freq_factors.size(), static_cast<size_t>(c.rope_dim / 2));
}

}  // namespace
}  // namespace infera::tensor_schema_test
