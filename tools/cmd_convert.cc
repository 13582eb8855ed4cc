// infera convert: write a llama.cpp-compatible GGUF from any supported input,
// or a random-weight model of a standard shape (--random).
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "base/logging.h"
#include "base/output_file.h"
#include "formats/gguf_writer.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "tensor/fp16.h"
#include "tokenizer/loader.h"
#include "tools/commands.h"
#include "tools/model_writer.h"

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

int ConvertRandom(const ConvertArgs& a) {
  if (a.paths.size() != 1) return ReportError("convert --random SHAPE takes one output path");
  if (Status st = CheckOutputNotInput(a.paths[0], {a.vocab}); !st.ok()) return ReportError(st);
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
  if (Status st = CheckOutputNotInput(a.paths[1], {a.paths[0], a.tokenizer}); !st.ok()) return ReportError(st);
  auto lm = LoadModelAndTokenizer(a.paths[0], a.tokenizer, false);
  if (!lm.ok()) return ReportError(lm.status());
  const Model& m = *lm->model;
  std::optional<DType> out_type;
  if (a.outtype != "keep") {
    out_type = ParseDTypeName(a.outtype);
    if (!out_type || (*out_type != DType::kF32 && *out_type != DType::kF16 && *out_type != DType::kBF16)) {
      return ReportError("--outtype must be keep, f32, f16 or bf16");
    }
  }
  ModelWriteOptions wo;
  wo.embed_tokenizer = !m.gguf || !a.tokenizer.empty();
  wo.file_type = out_type.value_or(m.weights->layers[0].wq.type);
  // (MoE routers stay f32, as llama.cpp's converter keeps them.)
  auto keep_or = [&](const std::string& name, const WeightMatrix& x) {
    return name.find("ffn_gate_inp") != std::string::npos ? DType::kF32 : out_type.value_or(x.type);
  };
  auto written = WriteModelGguf(*lm, keep_or,
                                wo, a.paths[1]);
  if (!written.ok()) return ReportError(written.status());
  LOG_INFO("wrote {}", a.paths[1]);
  return kExitOk;
}

}  // namespace

CommandFn RegisterConvert(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("paths", a->paths, "IN OUT.gguf (or only OUT.gguf with --random)")->required();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file to embed (llama2.c .bin or GGUF)");
  app.add_option("--outtype", a->outtype, "keep, f32, f16 or bf16");
  app.add_option(
      "--random", a->random_shape,
      "write random weights of a standard shape: tiny, m360, m1b, m3b (OpenLLaMA-3B), g2b (Gemma 2 2B, 32000 "
      "vocabulary), moe-s (8 experts, top-2), moe-s-dense (its dense twin), moe-tiny (4 experts, top-2, tiny's size)");
  app.add_option("--vocab", a->vocab, "with --random: take the vocabulary from this GGUF or tokenizer file");
  app.add_option("--seed", a->seed, "with --random: RNG seed");
  return [a]() { return Convert(*a); };
}

}  // namespace infera::cli
