// infera quantize IN OUT --type T: writes a llama.cpp-compatible GGUF whose
// weight matrices are stored in T (norms stay f32), with mixed precision by
// --keep PATTERN=TYPE and llama.cpp's rule for the output tensor.
#include <fnmatch.h>

#include <cstdio>

#include <fmt/format.h>

#include "base/file_util.h"
#include "base/logging.h"
#include "quant/quantize.h"
#include "tools/commands.h"
#include "tools/model_writer.h"

namespace infera::cli {
namespace {

struct QuantizeArgs {
  std::vector<std::string> paths;
  std::string type;
  std::vector<std::string> keep;
  bool pure = false;
  std::string tokenizer;
};

int Quantize(const QuantizeArgs& a) {
  if (a.paths.size() != 2) return ReportError("usage: infera quantize IN OUT.gguf --type T");
  auto type = ParseDTypeName(a.type);
  if (!type || !CanQuantize(*type)) return ReportError("--type must be one of q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16, f32");
  struct Rule { std::string pattern; DType type; };
  std::vector<Rule> rules;
  for (const auto& k : a.keep) {
    const auto eq = k.rfind('=');
    if (eq == std::string::npos || eq == 0) return ReportError("--keep takes PATTERN=TYPE, e.g. output.weight=q8_0");
    auto t = ParseDTypeName(k.substr(eq + 1));
    if (!t || !CanQuantize(*t)) return ReportError("--keep: cannot write type '" + k.substr(eq + 1) + "'");
    rules.push_back({k.substr(0, eq), *t});
  }
  auto lm = LoadModelAndTokenizer(a.paths[0], a.tokenizer, false);
  if (!lm.ok()) return ReportError(lm.status());
  const bool tied = lm->model->config.tied_embeddings;
  // The tensor that produces the logits: llama.cpp keeps it at higher
  // precision (Q6_K for most types; Q8_0 here until K-quants can be written).
  const std::string output_name = tied ? "token_embd.weight" : "output.weight";
  auto choose = [&](const std::string& name, const WeightMatrix&) -> DType {
    for (const auto& r : rules) {
      if (fnmatch(r.pattern.c_str(), name.c_str(), 0) == 0) return r.type;
    }
    if (!a.pure && name == output_name && GetDTypeInfo(*type).quantized && *type != DType::kQ8_0) return DType::kQ8_0;
    return *type;
  };
  ModelWriteOptions wo;
  wo.embed_tokenizer = !lm->model->gguf || !a.tokenizer.empty();
  wo.file_type = *type;
  wo.show_progress = true;
  auto sum = WriteModelGguf(*lm, choose, wo, a.paths[1]);
  if (!sum.ok()) return ReportError(sum.status());
  auto size = FileSize(a.paths[1]);
  std::string types;
  for (const auto& [t, n] : sum->tensors_per_type) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, t);
  std::fprintf(stderr, "wrote %s: %.2f MiB, %.3f bits per weight; tensors: %s\n", a.paths[1].c_str(),
               size.ok() ? *size / 1048576.0 : 0.0, 8.0 * sum->bytes / static_cast<double>(sum->elements), types.c_str());
  return kExitOk;
}

}  // namespace

CommandFn RegisterQuantize(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("paths", a->paths, "IN (GGUF, HF folder or llama2.c checkpoint) OUT.gguf")->required();
  app.add_option("--type", a->type, "q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16 or f32")->required();
  app.add_option("--keep", a->keep, "PATTERN=TYPE: store tensors whose name matches the glob in TYPE (repeatable)");
  app.add_flag("--pure", a->pure, "every weight matrix in --type, the output tensor too (llama-quantize --pure)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer to embed (llama2.c checkpoints)");
  return [a]() { return Quantize(*a); };
}

}  // namespace infera::cli
