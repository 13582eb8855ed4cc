// infera quantize IN OUT --type T: writes a llama.cpp-compatible GGUF whose
// weight matrices are stored in T (norms stay f32), with mixed precision by
// --keep PATTERN=TYPE, llama.cpp's presets (Q4_K_M, ...), its rule for the
// output tensor and its fallback for rows that do not fit a K-quant block.
#include <fnmatch.h>

#include <cstdio>

#include <fmt/format.h>

#include "base/file_util.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "model/tensor_schema.h"
#include "quant/policy.h"
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
  if (Status st = CheckOutputNotInput(a.paths[1], {a.paths[0], a.tokenizer}); !st.ok()) return ReportError(st);
  const auto target = ParseQuantTarget(a.type);
  if (!target) {
    return ReportError("--type must be one of q8_0, q6_k, q5_k_m, q5_k_s, q5_k, q5_1, q5_0, q4_k_m, q4_k_s, q4_k, "
                       "q4_1, q4_0, iq4_nl, q3_k_m, q3_k, q2_k, f16, bf16, f32");
  }
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
  const int n_layer = lm->model->config.n_layer;
  // The tensor that produces the logits gets llama.cpp's rule (Q6_K).
  const std::string output_name = GlobalTensorName(tied ? &ModelWeights::tok_embd : &ModelWeights::output);
  auto choose = [&](const std::string& name, const WeightMatrix& m) -> DType {
    for (const auto& r : rules) {
      if (fnmatch(r.pattern.c_str(), name.c_str(), 0) == 0) return FallbackForShape(r.type, m.n_in);
    }
    return ChooseTensorType(*target, name, m.n_in, n_layer, output_name, a.pure);
  };
  ModelWriteOptions wo;
  wo.embed_tokenizer = !lm->model->gguf || !a.tokenizer.empty();
  wo.file_type = target->base;
  wo.llama_ftype = target->ftype;
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
  app.add_option("--type", a->type,
                 "a type (q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, iq4_nl, q3_k, q2_k, f16, bf16, f32) or a "
                 "llama.cpp mixture (q5_k_m, q5_k_s, q4_k_m, q4_k_s, q3_k_m)")->required();
  app.add_option("--keep", a->keep, "PATTERN=TYPE: store tensors whose name matches the glob in TYPE (repeatable)");
  app.add_flag("--pure", a->pure, "every weight matrix in --type, the output tensor too (llama-quantize --pure)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer to embed (llama2.c checkpoints)");
  return [a]() { return Quantize(*a); };
}

}  // namespace infera::cli
