#include "model/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "formats/gguf_writer.h"
#include "model/arch/registry.h"
#include "model/tensor_schema.h"
#include "tensor/fp16.h"

namespace infera {

StatusOr<ModelConfig> RandomModelShape(const std::string& name) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.rope_style = RopeStyle::kNorm;
  c.rms_eps = 1e-5f;
  if (name == "tiny" || name == "moe-tiny") {
    c.n_vocab = 512; c.n_embd = 128; c.n_layer = 4; c.n_head = 4; c.n_head_kv = 2; c.n_ff = 384;
    c.n_ctx_train = 2048; c.rope_theta = 10000.0f;
    if (name == "moe-tiny") {
      // The same with 4 experts, top-2: for tests that need an MoE file but
      // not its speed.
      c.n_expert = 4;
      c.n_expert_used = 2;
      c.n_ff_exp = 192;
    }
  } else if (name == "m360") {
    c.n_vocab = 32000; c.n_embd = 960; c.n_layer = 32; c.n_head = 15; c.n_head_kv = 5; c.n_ff = 2560;
    c.n_ctx_train = 8192; c.rope_theta = 100000.0f; c.tied_embeddings = true;
  } else if (name == "m1b") {
    c.n_vocab = 32000; c.n_embd = 2048; c.n_layer = 22; c.n_head = 32; c.n_head_kv = 4; c.n_ff = 5632;
    c.n_ctx_train = 2048; c.rope_theta = 10000.0f;
  } else if (name == "m3b") {
    // OpenLLaMA-3B's shape (Llama, 32000 vocabulary): too large for any L3,
    // for decode against the memory roof.
    c.n_vocab = 32000; c.n_embd = 3200; c.n_layer = 26; c.n_head = 32; c.n_head_kv = 32; c.n_ff = 8640;
    c.n_ctx_train = 2048; c.rope_theta = 10000.0f;
  } else if (name == "g2b") {
    // Gemma 2 2B's body (GELU-tanh FFN 9216 wide, head_dim 256, soft caps,
    // a 4096 window on every other layer) with a 32000 vocabulary.
    ApplyArchShape(Gemma2Arch(), &c);
    c.n_vocab = 32000; c.n_embd = 2304; c.n_layer = 26; c.n_head = 8; c.n_head_kv = 4; c.n_ff = 9216;
    c.n_ctx_train = 8192; c.rope_theta = 10000.0f; c.tied_embeddings = true;
    c.sliding_window = 4096; c.attn_softcap = 50.0f; c.final_softcap = 30.0f;
    c.head_dim = 256;
  } else if (name == "moe-s" || name == "moe-s-dense") {
    // A small Mixtral-shaped model (8 experts, top-2) and the dense model
    // with the same active parameters (an FFN as wide as two experts).
    c.n_vocab = 32000; c.n_embd = 1024; c.n_layer = 8; c.n_head = 16; c.n_head_kv = 4; c.n_ff = 3584;
    c.n_ctx_train = 4096; c.rope_theta = 1000000.0f;
    if (name == "moe-s") {
      c.n_expert = 8;
      c.n_expert_used = 2;
      c.n_ff_exp = 1792;
    }
  } else {
    return InvalidArgument("unknown model shape '" + name +
                           "' (known: tiny, m360, m1b, m3b, g2b, moe-s, moe-s-dense, moe-tiny)");
  }
  c.name = "infera-random-" + name;
  if (c.head_dim == 0) c.head_dim = c.n_embd / c.n_head;
  c.rope_dim = c.head_dim;
  return c;
}

Vocab MakeSyntheticVocab(int n_vocab) {
  Vocab v;
  auto add = [&](const std::string& p, float score, TokenType t) {
    v.pieces.push_back(p);
    v.scores.push_back(score);
    v.types.push_back(t);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0, TokenType::kByte);
  const std::string sp = "\xE2\x96\x81";
  float score = -1;
  add(sp, score--, TokenType::kNormal);
  for (char c = 'a'; c <= 'z'; ++c) add(sp + c, score--, TokenType::kNormal);
  for (int c = 33; c < 127; ++c) add(std::string(1, static_cast<char>(c)), score--, TokenType::kNormal);
  const char* words[] = {"the",    "and", "was",   "to",   "he",     "she", "it",   "of",   "in",   "said", "they",
                         "with",   "his", "her",   "on",   "that",   "for", "day",  "time", "once", "upon", "there",
                         "little", "big", "happy", "play", "friend", "sun", "tree", "dog",  "cat",  "bird"};
  for (const char* w : words) {
    if (static_cast<int>(v.pieces.size()) >= n_vocab) break;
    add(sp + w, score--, TokenType::kNormal);
  }
  while (static_cast<int>(v.pieces.size()) < n_vocab) {
    add(fmt::format("<unused{}>", v.pieces.size()), -1e9f, TokenType::kUnused);
  }
  v.pieces.resize(n_vocab);
  v.scores.resize(n_vocab);
  v.types.resize(n_vocab);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.Finalize();
  return v;
}

void WriteModelMetadata(const ModelConfig& c, DType file_type, GgufWriter* w) {
  const ArchInfo& info = GetArch(c.arch);
  const std::string a = info.gguf_arch();
  w->SetString("general.architecture", a);
  w->SetString("general.name", c.name);
  uint32_t ftype = 0;  // llama.cpp's LLAMA_FTYPE values
  if (file_type == DType::kF16) ftype = 1;
  else if (file_type == DType::kBF16) ftype = 32;
  w->SetU32("general.file_type", ftype);
  w->SetU32(a + ".context_length", c.n_ctx_train);
  w->SetU32(a + ".embedding_length", c.n_embd);
  w->SetU32(a + ".block_count", c.n_layer);
  // Per-layer widths as llama.cpp's converter writes them: an INT32 array.
  auto set_width = [&](const std::string& key, int value, const std::vector<int>& per_layer) {
    if (per_layer.empty()) w->SetU32(key, value);
    else w->SetI32Array(key, std::vector<int32_t>(per_layer.begin(), per_layer.end()));
  };
  set_width(a + ".feed_forward_length", c.n_ff, c.layer_n_ff);
  if (c.moe()) {  // llama.cpp's keys (mixtral: llama.expert_count, experts feed_forward_length wide)
    w->SetU32(a + ".expert_count", c.n_expert);
    w->SetU32(a + ".expert_used_count", c.n_expert_used);
    if (c.n_ff_exp != c.n_ff || a != "llama") w->SetU32(a + ".expert_feed_forward_length", c.n_ff_exp);
    if (c.n_ff_shexp > 0) w->SetU32(a + ".expert_shared_feed_forward_length", c.n_ff_shexp);
    if (c.expert_weights_norm != info.expert_weights_norm) w->SetBool(a + ".expert_weights_norm", c.expert_weights_norm);
  }
  set_width(a + ".attention.head_count", c.n_head, c.layer_n_head);
  set_width(a + ".attention.head_count_kv", c.n_head_kv, c.layer_n_head_kv);
  w->SetF32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w->SetF32(a + ".rope.freq_base", c.rope_theta);
  w->SetU32(a + ".rope.dimension_count", c.rope_dim);
  if (c.head_dim != c.n_embd / c.n_head) {
    w->SetU32(a + ".attention.key_length", c.head_dim);
    w->SetU32(a + ".attention.value_length", c.head_dim);
  }
  if (c.sliding_window > 0) w->SetU32(a + ".attention.sliding_window", c.sliding_window);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScaling::Type::kLinear) {
    w->SetString(a + ".rope.scaling.type", "linear");
    w->SetF32(a + ".rope.scaling.factor", rs.factor);
  } else if (rs.type == RopeScaling::Type::kYarn) {  // llama.cpp's keys
    w->SetString(a + ".rope.scaling.type", "yarn");
    w->SetF32(a + ".rope.scaling.factor", rs.factor);
    w->SetU32(a + ".rope.scaling.original_context_length", rs.original_max_position);
    if (rs.yarn_beta_fast != 32.0f) w->SetF32(a + ".rope.scaling.yarn_beta_fast", rs.yarn_beta_fast);
    if (rs.yarn_beta_slow != 1.0f) w->SetF32(a + ".rope.scaling.yarn_beta_slow", rs.yarn_beta_slow);
    const float attn_factor = rs.mscale / YarnDefaultMscale(rs.factor);
    if (std::fabs(attn_factor - 1.0f) > 1e-6f) w->SetF32(a + ".rope.scaling.attn_factor", attn_factor);
  } else if (rs.type == RopeScaling::Type::kLongRope) {  // (the factors are tensors)
    w->SetU32(a + ".rope.scaling.original_context_length", rs.original_max_position);
    w->SetF32(a + ".rope.scaling.attn_factor", rs.mscale);
  }
  if (c.embedding_scale != 1.0f) w->SetF32(a + ".embedding_scale", c.embedding_scale);
  if (c.residual_scale != 1.0f) w->SetF32(a + ".residual_scale", c.residual_scale);
  if (c.attention_scale != 0.0f) w->SetF32(a + ".attention.scale", c.attention_scale);
  if (c.logit_scale != 1.0f) w->SetF32(a + ".logit_scale", c.logit_scale);
  // Gemma (llama.cpp's keys); the sliding layers' RoPE base only where it
  // is not the family's default, which llama.cpp assumes.
  if (c.attn_softcap > 0) w->SetF32(a + ".attn_logit_softcapping", c.attn_softcap);
  if (c.final_softcap > 0) w->SetF32(a + ".final_logit_softcapping", c.final_softcap);
  if (c.rope_theta_swa != info.rope_theta_swa) w->SetF32(a + ".rope.freq_base_swa", c.rope_theta_swa);
  w->SetU32(a + ".vocab_size", c.n_vocab);
}

void WriteTokenizerMetadata(const Vocab& v, GgufWriter* w) {
  w->SetString("tokenizer.ggml.model", "llama");
  w->SetStringArray("tokenizer.ggml.tokens", v.pieces);
  w->SetF32Array("tokenizer.ggml.scores", v.scores);
  std::vector<int32_t> types;
  for (auto t : v.types) types.push_back(static_cast<int32_t>(t));
  w->SetI32Array("tokenizer.ggml.token_type", types);
  if (v.bos >= 0) w->SetU32("tokenizer.ggml.bos_token_id", v.bos);
  if (v.eos >= 0) w->SetU32("tokenizer.ggml.eos_token_id", v.eos);
  if (v.unk >= 0) w->SetU32("tokenizer.ggml.unknown_token_id", v.unk);
  if (v.pad >= 0) w->SetU32("tokenizer.ggml.padding_token_id", v.pad);
  w->SetBool("tokenizer.ggml.add_bos_token", v.add_bos);
  w->SetBool("tokenizer.ggml.add_eos_token", v.add_eos);
  w->SetBool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!v.chat_template.empty()) w->SetString("tokenizer.chat_template", v.chat_template);
}

Status WriteRandomGguf(const ModelConfig& c, const Vocab& vocab, DType type, uint64_t seed, const std::string& path) {
  if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16) {
    return InvalidArgument(std::string("random models are written as f32, f16 or bf16, not ") + DTypeName(type));
  }
  if (vocab.size() != c.n_vocab) return InvalidArgument(fmt::format("vocab has {} tokens, model needs {}", vocab.size(), c.n_vocab));
  GgufWriter w;
  WriteModelMetadata(c, type, &w);
  WriteTokenizerMetadata(vocab, &w);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  // n_stack > 0: n_stack matrices stacked as one 3-D tensor (MoE experts).
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, int64_t n_stack = 0) {
    const int64_t n = n_in * n_out * std::max<int64_t>(1, n_stack);
    std::vector<uint8_t> bytes(n * (type == DType::kF32 ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
      const float x = normal(rng);
      if (type == DType::kF32) std::memcpy(&bytes[i * 4], &x, 4);
      else {
        const uint16_t h = type == DType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    std::vector<int64_t> ne = {n_in, n_out};
    if (n_stack > 0) ne.push_back(n_stack);
    w.AddTensorCopy(name, type, ne, std::move(bytes));
  };
  auto constant = [&](const std::string& name, int64_t n, float value) {
    std::vector<uint8_t> bytes(n * 4);
    for (int64_t i = 0; i < n; ++i) std::memcpy(&bytes[i * 4], &value, 4);
    w.AddTensorCopy(name, DType::kF32, {n}, std::move(bytes));
  };
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (r.presence == Presence::kOptional) return;  // derived data (rope_freqs), not weights
    const std::string name = GgufTensorName(r, layer);
    if (IsExpertRole(r)) {
      matrix(name, DimSize(c, r.n_in, layer), DimSize(c, r.n_out, layer), c.n_expert);
    } else if (r.matrix) {
      matrix(name, DimSize(c, r.n_in, layer), RoleRows(r, c, layer));
    } else {
      constant(name, DimSize(c, r.n_in, layer), r.init == Init::kZeros ? 0.0f : 1.0f);
    }
  });
  return w.Write(path);
}

}  // namespace infera
