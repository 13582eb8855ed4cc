// infera convert: write a llama.cpp-compatible GGUF from any supported input,
// or a random-weight model of a standard shape (--random).
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "base/logging.h"
#include "formats/gguf_writer.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "tensor/fp16.h"
#include "tokenizer/loader.h"
#include "tools/commands.h"

namespace infera::cli {
namespace {

struct ConvertArgs {
  std::vector<std::string> paths;
  std::string tokenizer;
  std::string outtype = "keep";
  std::string random_shape;
  std::string vocab;
  uint64_t seed = 1234;
};

std::vector<uint8_t> ConvertRows(const WeightMatrix& m, DType to) {
  const int64_t n = m.n_in * m.n_out;
  const size_t esz = to == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> out(n * esz);
  for (int64_t i = 0; i < n; ++i) {
    float x = 0;
    uint16_t h;
    switch (m.type) {
      case DType::kF32: std::memcpy(&x, m.data + i * 4, 4); break;
      case DType::kF16: std::memcpy(&h, m.data + i * 2, 2); x = Fp16ToFp32(h); break;
      case DType::kBF16: std::memcpy(&h, m.data + i * 2, 2); x = Bf16ToFp32(h); break;
      default: break;
    }
    if (to == DType::kF32) std::memcpy(&out[i * 4], &x, 4);
    else {
      h = to == DType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

int ConvertRandom(const ConvertArgs& a) {
  if (a.paths.size() != 1) return ReportError("convert --random SHAPE takes one output path");
  auto shape = RandomModelShape(a.random_shape);
  if (!shape.ok()) return ReportError(shape.status());
  const std::string t = a.outtype == "keep" ? "f16" : a.outtype;
  auto type = ParseDTypeName(t);
  if (!type) return ReportError("--outtype must be f32, f16 or bf16");
  Vocab vocab;
  if (!a.vocab.empty()) {
    auto tok = TokenizerFromFile(a.vocab, -1);
    if (!tok.ok()) return ReportError(tok.status());
    vocab = (*tok)->vocab();
    if (vocab.size() != shape->n_vocab) {
      return ReportError(fmt::format("--vocab has {} tokens but shape {} needs {}", vocab.size(), a.random_shape, shape->n_vocab));
    }
  } else {
    vocab = MakeSyntheticVocab(shape->n_vocab);
  }
  if (Status st = WriteRandomGguf(*shape, vocab, *type, a.seed, a.paths[0]); !st.ok()) return ReportError(st);
  LOG_INFO("wrote {} ({} {})", a.paths[0], a.random_shape, DTypeName(*type));
  return kExitOk;
}

int Convert(const ConvertArgs& a) {
  if (!a.random_shape.empty()) return ConvertRandom(a);
  if (a.paths.size() != 2) return ReportError("usage: infera convert IN OUT.gguf");
  auto lm = LoadModelAndTokenizer(a.paths[0], a.tokenizer, false);
  if (!lm.ok()) return ReportError(lm.status());
  const Model& m = *lm->model;
  const ModelConfig& c = m.config;
  std::optional<DType> out_type;
  if (a.outtype != "keep") {
    out_type = ParseDTypeName(a.outtype);
    if (!out_type || (*out_type != DType::kF32 && *out_type != DType::kF16 && *out_type != DType::kBF16)) {
      return ReportError("--outtype must be keep, f32, f16 or bf16");
    }
  }
  const auto& w = *m.weights;
  GgufWriter gw;
  if (m.gguf) {
    for (const auto& [k, v] : m.gguf->metadata()) {
      if (k != "general.alignment") gw.SetValue(k, v);
    }
  }
  WriteModelMetadata(c, out_type.value_or(w.layers[0].wq.type), &gw);
  if (!m.gguf || !a.tokenizer.empty()) {
    if (lm->tokenizer && std::string(lm->tokenizer->GgufModelName()) == "llama") {
      WriteTokenizerMetadata(lm->tokenizer->vocab(), &gw);
    } else if (lm->tokenizer) {
      LOG_WARN("byte-level BPE tokenizers are not embedded by convert yet: the output has no tokenizer metadata");
    } else {
      LOG_WARN("no tokenizer: the output has no tokenizer metadata (pass --tokenizer)");
    }
  }
  auto mat = [&](const std::string& name, const WeightMatrix& x) {
    if (out_type && *out_type != x.type) {
      gw.AddTensorCopy(name, *out_type, {x.n_in, x.n_out}, ConvertRows(x, *out_type));
    } else {
      gw.AddTensor(name, x.type, {x.n_in, x.n_out}, x.data, x.row_bytes * x.n_out);
    }
  };
  auto vec = [&](const std::string& name, const std::vector<float>& v) {
    gw.AddTensor(name, DType::kF32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * 4);
  };
  mat("token_embd.weight", w.tok_embd);
  vec("output_norm.weight", w.output_norm);
  if (!c.tied_embeddings) mat("output.weight", w.output);
  if (!w.rope_freq_factors.empty()) vec("rope_freqs.weight", w.rope_freq_factors);
  for (int l = 0; l < c.n_layer; ++l) {
    const auto& L = w.layers[l];
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    vec(n("attn_norm.weight"), L.attn_norm);
    mat(n("attn_q.weight"), L.wq);
    mat(n("attn_k.weight"), L.wk);
    mat(n("attn_v.weight"), L.wv);
    mat(n("attn_output.weight"), L.wo);
    if (c.qkv_bias) {
      vec(n("attn_q.bias"), L.bq);
      vec(n("attn_k.bias"), L.bk);
      vec(n("attn_v.bias"), L.bv);
    }
    vec(n("ffn_norm.weight"), L.ffn_norm);
    mat(n("ffn_gate.weight"), L.w_gate);
    mat(n("ffn_up.weight"), L.w_up);
    mat(n("ffn_down.weight"), L.w_down);
  }
  if (Status st = gw.Write(a.paths[1]); !st.ok()) return ReportError(st);
  LOG_INFO("wrote {}", a.paths[1]);
  return kExitOk;
}

}  // namespace

CommandFn RegisterConvert(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("paths", a->paths, "IN OUT.gguf (or only OUT.gguf with --random)")->required();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file to embed (llama2.c .bin or GGUF)");
  app.add_option("--outtype", a->outtype, "keep, f32, f16 or bf16");
  app.add_option("--random", a->random_shape, "write random weights of a standard shape: tiny, m360, m1b");
  app.add_option("--vocab", a->vocab, "with --random: take the vocabulary from this GGUF or tokenizer file");
  app.add_option("--seed", a->seed, "with --random: RNG seed");
  return [a]() { return Convert(*a); };
}

}  // namespace infera::cli
