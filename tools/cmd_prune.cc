// infera prune IN OUT: writes a pruned GGUF.
//
//   unstructured / N:M   --method magnitude|wanda|sparsegpt --sparsity S
//                        [--pattern unstructured|2:4|4:8] [--steps K
//                        --max-ppl-increase P]
//   structured           --structured heads|ffn|both --ratio R
//
// Calibration text (--calib) runs through infera's own forward pass with
// activation hooks; Wanda and SparseGPT go layer by layer, so each layer is
// calibrated on the outputs of the already pruned layers before it. The
// output is written to a temporary file and renamed at the end: a failed
// run leaves nothing behind.
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"
#include "base/linalg.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "model/tensor_schema.h"
#include "prune/damp_selection.h"
#include "prune/model_pruning.h"
#include "prune/sparsity.h"
#include "quant/policy.h"
#include "tools/commands.h"
#include "tools/model_writer.h"
#include "tools/prune_calibration.h"

namespace infera::cli {
namespace {

struct PruneArgs {
  std::vector<std::string> paths;
  std::string method = "wanda";
  double sparsity = -1;  // -1: 0.5, or what the N:M pattern implies
  std::string pattern = "unstructured";
  std::string calib;
  int32_t calib_tokens = 4096;
  int32_t calib_ctx = 0;  // 0: 256, or the trained context if shorter
  std::vector<std::string> skip;
  std::string outtype;
  std::string structured;
  double ratio = 0.25;
  double head_ratio = -1, ffn_ratio = -1;
  int steps = 1;
  double max_ppl_increase = -1;  // percent; < 0: no limit
  std::string damp = "0.01";  // a number, or "auto"
  double damp_value = 0.01;   // parsed from damp; < 0: auto
  int block_size = 128;
  int threads = 0;
  std::string report;
  bool dense_output = false;
};

using prune::LayerMatrix;

bool Skipped(const std::vector<std::string>& skip, const std::string& name) {
  const std::string base = name.substr(0, name.find('['));
  for (const auto& p : skip) {
    if (fnmatch(p.c_str(), base.c_str(), 0) == 0) return true;
  }
  return false;
}

// Prunes one matrix with `stats` of its input (null: magnitude). SparseGPT
// with --damp auto also gets `check`, statistics of other calibration chunks
// than `stats`' (null: no choice, the default damping): the damping is chosen
// by the error on those, then the matrix is pruned with both halves' Hessian.
// Returns the damping used (0 when not SparseGPT).
StatusOr<double> PruneMatrix(const LayerMatrix& lm, const std::string& method, const prune::InputStats* stats,
                             const prune::InputStats* check, double sparsity, const prune::Pattern& pattern,
                             const PruneArgs& a, int threads) {
  WeightMatrix& m = *lm.m;
  float* w = const_cast<float*>(reinterpret_cast<const float*>(m.data));
  if (method == "sparsegpt" && stats != nullptr) {
    prune::SparseGptOptions o;
    o.sparsity = sparsity;
    o.pattern = pattern;
    o.block_size = a.block_size;
    o.damp = a.damp_value >= 0 ? a.damp_value : 0.01;
    std::vector<double> h = stats->hessian();
    if (a.damp_value < 0 && check != nullptr) {
      const std::vector<double> h_check = check->hessian();
      auto choice = prune::ChooseSparseGptDamp(w, m.n_out, m.n_in, h, h_check, o, prune::AutoDampCandidates(), threads);
      if (!choice.ok()) return Status(choice.status().code(), lm.name + ": " + choice.status().message());
      o.damp = choice->damp;
      for (size_t i = 0; i < h.size(); ++i) h[i] += h_check[i];
    }
    Status st = prune::SparseGpt(w, m.n_out, m.n_in, std::move(h), o, threads);
    if (!st.ok()) return Status(st.code(), lm.name + ": " + st.message());
    return o.damp;
  }
  const auto score = prune::WeightScores(w, m.n_out, m.n_in, method == "magnitude" || stats == nullptr
                                                                   ? nullptr : stats->sq_norm().data());
  prune::PruneByScore(w, score.data(), m.n_out, m.n_in, sparsity, pattern);
  return 0.0;
}

struct PruneContext {
  const PruneArgs& a;
  Model& model;
  std::vector<LayerMatrix> mats;  // the ones to prune
  prune::Pattern pattern;
  std::unique_ptr<Calibrator> calibrator;
  std::vector<std::vector<int32_t>> calib, holdout;
  // --damp auto: calib split in two (even and odd chunks).
  std::vector<std::vector<int32_t>> calib_even, calib_odd;
  std::map<std::string, double> damp_used;  // SparseGPT: tensor -> damping
  int threads = 1;
};

// One pass of unstructured / N:M pruning to `sparsity`, layer by layer.
Status PrunePass(PruneContext& ctx, double sparsity) {
  const PruneArgs& a = ctx.a;
  const int n_layer = ctx.model.config.n_layer;
  const bool calibrated = a.method != "magnitude";
  const auto t0 = std::chrono::steady_clock::now();
  int warned_experts = 0;
  const bool sparsegpt = a.method == "sparsegpt";
  const bool split = sparsegpt && a.damp_value < 0;
  for (int l = 0; l < n_layer; ++l) {
    std::unique_ptr<StatsCollector> stats, check;
    if (calibrated) {
      stats = std::make_unique<StatsCollector>(std::vector<int>{l}, std::vector<LinearInput>{}, sparsegpt);
      RETURN_IF_ERROR(ctx.calibrator->RunLayer(split ? ctx.calib_even : ctx.calib, l, stats.get()));
    }
    if (split) {
      check = std::make_unique<StatsCollector>(std::vector<int>{l}, std::vector<LinearInput>{}, true);
      RETURN_IF_ERROR(ctx.calibrator->RunLayer(ctx.calib_odd, l, check.get()));
    }
    for (const LayerMatrix& lm : ctx.mats) {
      if (lm.layer != l) continue;
      const prune::InputStats* s = stats ? stats->Find(l, lm.input, lm.expert) : nullptr;
      if (calibrated && s == nullptr && warned_experts++ == 0) {
        LOG_WARN("{}: no calibration token reached it; pruned by magnitude (further such tensors not reported)",
                 lm.name);
      }
      const prune::InputStats* c = check ? check->Find(l, lm.input, lm.expert) : nullptr;
      if (s == nullptr && c != nullptr) std::swap(s, c);  // an expert reached by one half only
      auto damp = PruneMatrix(lm, a.method, s, c, sparsity, ctx.pattern, a, ctx.threads);
      if (!damp.ok()) return damp.status();
      if (sparsegpt && s != nullptr) ctx.damp_used[lm.name] = *damp;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\rprune: %s %s %.0f %%: layer %d/%d, %.1f s", a.method.c_str(), ctx.pattern.Name().c_str(),
                 100 * sparsity, l + 1, n_layer, secs);
    std::fflush(stderr);
  }
  std::fputc('\n', stderr);
  return Status::Ok();
}

// Saved values of the matrices to prune (to undo a step).
std::vector<std::vector<float>> Snapshot(const std::vector<LayerMatrix>& mats) {
  std::vector<std::vector<float>> out;
  for (const auto& lm : mats) {
    const float* w = reinterpret_cast<const float*>(lm.m->data);
    out.emplace_back(w, w + lm.m->n_in * lm.m->n_out);
  }
  return out;
}

void Restore(const std::vector<LayerMatrix>& mats, const std::vector<std::vector<float>>& saved) {
  for (size_t i = 0; i < mats.size(); ++i) {
    std::copy(saved[i].begin(), saved[i].end(), const_cast<float*>(reinterpret_cast<const float*>(mats[i].m->data)));
  }
}

int Prune(PruneArgs a, const RuntimeOptions& rt_in) {
  if (a.paths.size() != 2) return ReportError("usage: infera prune IN OUT.gguf --method M --sparsity S");
  const bool structured = !a.structured.empty();
  const bool heads = a.structured == "heads" || a.structured == "both";
  const bool ffn = a.structured == "ffn" || a.structured == "both";
  if (structured && !heads && !ffn) return ReportError("--structured must be heads, ffn or both");
  if (a.method != "magnitude" && a.method != "wanda" && a.method != "sparsegpt") {
    return ReportError("--method must be magnitude, wanda or sparsegpt");
  }
  auto pattern = prune::ParsePattern(a.pattern);
  if (!pattern.ok()) return ReportError(pattern.status());
  double sparsity = a.sparsity;
  if (pattern->nm()) {
    const double implied = 1.0 - static_cast<double>(pattern->n) / pattern->m;
    if (sparsity >= 0 && std::fabs(sparsity - implied) > 1e-9) {
      return ReportError(fmt::format("--pattern {} means sparsity {}; drop --sparsity or give {}", pattern->Name(),
                                     implied, implied));
    }
    sparsity = implied;
  } else if (sparsity < 0) {
    sparsity = 0.5;
  }
  if (!structured) {
    if (Status st = prune::CheckShape(pattern->nm() ? pattern->m : 1, sparsity, *pattern); !st.ok()) return ReportError(st);
  }
  const double head_ratio = heads ? (a.head_ratio >= 0 ? a.head_ratio : a.ratio) : 0.0;
  const double ffn_ratio = ffn ? (a.ffn_ratio >= 0 ? a.ffn_ratio : a.ratio) : 0.0;
  for (double r : {head_ratio, ffn_ratio}) {
    if (structured && (r < 0 || r >= 1)) return ReportError(fmt::format("--ratio must be in (0, 1), not {}", r));
  }
  if (a.steps < 1 || a.steps > 100) return ReportError("--steps must be in 1..100");
  if (a.steps > 1 && (structured || pattern->nm())) {
    return ReportError("--steps applies to unstructured pruning (an N:M pattern or a structure is one step)");
  }
  if (a.max_ppl_increase >= 0 && a.steps == 1) return ReportError("--max-ppl-increase needs --steps K > 1");
  const bool solves = a.method == "sparsegpt" && !structured;  // on OpenBLAS (base/linalg)
  if (solves) {
    if (Status st = LoadLinalg(); !st.ok()) return ReportError(st);  // before any work
  }
  if (a.damp == "auto") {
    a.damp_value = -1;
  } else {
    char* end = nullptr;
    a.damp_value = std::strtod(a.damp.c_str(), &end);
    if (a.damp.empty() || *end != '\0' || !(a.damp_value > 0 && a.damp_value < 10)) {
      return ReportError("--damp must be a number in (0, 10) or auto, not '" + a.damp + "'");
    }
  }
  if (a.block_size <= 0 || a.block_size % 64 != 0) {
    return ReportError("--block-size must be a positive multiple of 64");
  }
  const bool needs_calib = structured || a.method != "magnitude" || a.steps > 1;
  if (needs_calib && a.calib.empty()) {
    return ReportError(structured ? "structured pruning needs --calib FILE (calibration text)"
                                  : a.method + " needs --calib FILE (calibration text)");
  }
  if (a.calib_tokens < 16) return ReportError("--calib-tokens must be >= 16");
  if (a.calib_ctx != 0 && a.calib_ctx < 8) return ReportError("--calib-ctx must be >= 8");
  if (Status st = CheckOutputNotInput(a.paths[1], {a.paths[0], a.calib}); !st.ok()) return ReportError(st);
  if (!a.report.empty()) {
    if (Status st = CheckOutputNotInput(a.report, {a.paths[0], a.calib, a.paths[1]}); !st.ok()) return ReportError(st);
  }
  std::optional<QuantTarget> target;
  if (!a.outtype.empty()) {
    target = ParseQuantTarget(a.outtype);
    if (!target) return ReportError("--outtype must be a type `infera quantize --type` accepts (f32, f16, q8_0, q4_k_m, ...)");
  }

  std::optional<KernelTable> kernels;  // outlives the calibrator's engine
  auto lm = LoadModelAndTokenizer(a.paths[0], "", needs_calib);
  if (!lm.ok()) return ReportError(lm.status());
  Model& model = *lm->model;
  if (structured) {
    if (Status st = prune::CheckStructuredSupported(model.config, heads, ffn); !st.ok()) return ReportError(st);
  }
  // The stored type of every tensor (the output keeps it unless --outtype).
  std::map<std::string, DType> stored;
  for (const auto& m : prune::LayerMatrices(&model)) stored[m.name] = m.m->type;
  if (Status st = prune::MakeLayerMatricesF32(&model); !st.ok()) return ReportError(st);
  PruneContext ctx{a, model, {}, *pattern, nullptr, {}, {}, {}, {}, {}, ResolveThreads(a.threads)};
  if (solves) SetLinalgThreads(ctx.threads);
  for (const auto& m : prune::LayerMatrices(&model)) {
    if (Skipped(a.skip, m.name)) continue;
    if (!structured) {
      if (Status st = prune::CheckShape(m.m->n_in, sparsity, *pattern); !st.ok()) {
        return ReportError(m.name + ": " + st.message());
      }
    }
    ctx.mats.push_back(m);
  }
  if (ctx.mats.empty() && !structured) return ReportError("--skip leaves no tensor to prune");

  if (needs_calib) {
    auto text = ReadTextArg(a.calib);
    if (!text.ok()) return ReportError(text.status());
    const std::vector<int32_t> tokens = lm->tokenizer->Encode(*text, /*add_special=*/false, /*parse_special=*/false);
    const int32_t n_train = model.config.n_ctx_train;
    const int32_t n_ctx = a.calib_ctx > 0 ? a.calib_ctx : (n_train > 0 ? std::min(256, n_train) : 256);
    if (n_train > 0 && n_ctx > n_train) return ReportError(fmt::format("--calib-ctx {} is beyond the trained context {}", n_ctx, n_train));
    // A hold-out after the calibration tokens: a quarter as many (at least
    // two chunks) when --steps measures perplexity.
    const size_t holdout = a.steps > 1 ? std::max<size_t>(a.calib_tokens / 4, 2 * static_cast<size_t>(n_ctx)) : 0;
    if (tokens.size() < static_cast<size_t>(a.calib_tokens) + holdout) {
      return ReportError(fmt::format("{} has {} tokens; --calib-tokens {}{} needs at least {}", a.calib, tokens.size(),
                                     a.calib_tokens, holdout ? fmt::format(" plus a hold-out of {}", holdout) : "",
                                     a.calib_tokens + holdout));
    }
    const int32_t bos = lm->tokenizer->vocab().bos;
    ctx.calib = CalibrationChunks(tokens, 0, a.calib_tokens, n_ctx, bos);
    ctx.holdout = CalibrationChunks(tokens, a.calib_tokens, a.calib_tokens + holdout, n_ctx, bos);
    if (a.method == "sparsegpt" && a.damp_value < 0 && !structured) {
      if (ctx.calib.size() < 2) {
        return ReportError(fmt::format("--damp auto needs at least two calibration chunks of {} tokens; "
                                       "raise --calib-tokens to {} or lower --calib-ctx", n_ctx, 2 * n_ctx));
      }
      for (size_t i = 0; i < ctx.calib.size(); ++i) (i % 2 ? ctx.calib_odd : ctx.calib_even).push_back(ctx.calib[i]);
    }
    auto k = SelectKernels(rt_in);
    if (!k.ok()) return ReportError(k.status());
    kernels = *k;
    auto cal = Calibrator::Create(model, *lm->tokenizer, *kernels, ctx.threads, n_ctx);
    if (!cal.ok()) return ReportError(cal.status());
    ctx.calibrator = std::move(cal).value();
  }

  nlohmann::json report = {{"input", a.paths[0]}, {"output", a.paths[1]}};
  if (structured) {
    // One calibration pass: the inputs of wo and w_down in every layer.
    StatsCollector stats({}, {LinearInput::kAttnOut, LinearInput::kFfnMid}, false);
    if (Status st = ctx.calibrator->Run(ctx.calib, &stats); !st.ok()) return ReportError(st);
    const int n_layer = model.config.n_layer;
    std::vector<std::vector<double>> ss_attn(heads ? n_layer : 0), ss_ffn(ffn ? n_layer : 0);
    for (int l = 0; l < n_layer; ++l) {
      for (auto [v, which] : {std::pair{&ss_attn, LinearInput::kAttnOut}, std::pair{&ss_ffn, LinearInput::kFfnMid}}) {
        if (v->empty()) continue;
        const prune::InputStats* s = stats.Find(l, which, -1);
        if (s == nullptr) return ReportError(fmt::format("layer {}: no calibration activations", l));
        (*v)[l] = s->sq_norm();
      }
    }
    auto plan = prune::PlanStructured(model, ss_attn, ss_ffn, head_ratio, ffn_ratio);
    if (!plan.ok()) return ReportError(plan.status());
    const ModelConfig before = model.config;
    if (Status st = prune::ApplyStructured(&model, *plan); !st.ok()) return ReportError(st);
    nlohmann::json layers = nlohmann::json::array();
    for (int l = 0; l < n_layer; ++l) {
      layers.push_back({{"n_head", model.config.n_head_at(l)}, {"n_head_kv", model.config.n_head_kv_at(l)},
                        {"n_ff", model.config.n_ff_at(l)}, {"kept_kv_heads", plan->kv_heads[l]},
                        {"kept_ff", plan->ff[l]}});
    }
    report["structured"] = {{"heads_ratio", head_ratio}, {"ffn_ratio", ffn_ratio}, {"layers", layers}};
    std::fprintf(stderr, "prune: structured: heads %d -> %d, KV heads %d -> %d, FFN %d -> %d (layer 0)\n",
                 before.n_head_at(0), model.config.n_head_at(0), before.n_head_kv_at(0), model.config.n_head_kv_at(0),
                 before.n_ff_at(0), model.config.n_ff_at(0));
  } else {
    std::optional<double> dense_ppl;
    nlohmann::json steps = nlohmann::json::array();
    if (a.steps > 1) {
      auto p = ctx.calibrator->Perplexity(ctx.holdout);
      if (!p.ok()) return ReportError(p.status());
      dense_ppl = *p;
      std::fprintf(stderr, "prune: hold-out perplexity dense %.4f\n", *dense_ppl);
    }
    double reached = 0;
    for (int k = 1; k <= a.steps; ++k) {
      const double target = sparsity * k / a.steps;
      std::vector<std::vector<float>> saved;
      if (a.max_ppl_increase >= 0) saved = Snapshot(ctx.mats);
      if (Status st = PrunePass(ctx, target); !st.ok()) return ReportError(st);
      if (!dense_ppl) {
        reached = target;
        continue;
      }
      auto p = ctx.calibrator->Perplexity(ctx.holdout);
      if (!p.ok()) return ReportError(p.status());
      const double inc = 100.0 * (*p / *dense_ppl - 1.0);
      steps.push_back({{"sparsity", target}, {"ppl", *p}, {"increase_percent", inc}});
      std::fprintf(stderr, "prune: step %d/%d sparsity %.3f: hold-out perplexity %.4f (%+.2f %%)\n", k, a.steps, target,
                   *p, inc);
      if (a.max_ppl_increase >= 0 && inc > a.max_ppl_increase) {
        Restore(ctx.mats, saved);
        if (k == 1) {
          return ReportError(fmt::format("the first step (sparsity {:.3f}) already raises the hold-out perplexity by "
                                         "{:.2f} % > --max-ppl-increase {}; nothing written", target, inc,
                                         a.max_ppl_increase));
        }
        std::fprintf(stderr, "prune: stopped: step %d exceeds --max-ppl-increase %.2f %%; keeping sparsity %.3f\n", k,
                     a.max_ppl_increase, reached);
        break;
      }
      reached = target;
    }
    report["method"] = a.method;
    if (!ctx.damp_used.empty()) {
      report["sparsegpt_damp"] = ctx.damp_used;
      std::map<double, int> counts;
      for (const auto& [name, d] : ctx.damp_used) ++counts[d];
      std::string summary;
      for (const auto& [d, n] : counts) summary += fmt::format("{}{} x {}", summary.empty() ? "" : ", ", n, d);
      std::fprintf(stderr, "prune: SparseGPT damping%s: %s\n", a.damp_value < 0 ? " (auto)" : "", summary.c_str());
    }
    report["pattern"] = ctx.pattern.Name();
    report["sparsity"] = reached;
    if (dense_ppl) {
      report["dense_ppl"] = *dense_ppl;
      report["steps"] = steps;
    }
  }

  // Per-tensor sparsity, and the output.
  uint64_t zeros = 0, total = 0;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& m : prune::LayerMatrices(&model)) {
    const int64_t n = m.m->n_in * m.m->n_out;
    const double z = prune::ZeroFraction(reinterpret_cast<const float*>(m.m->data), n);
    tensors[m.name] = z;
    zeros += static_cast<uint64_t>(std::llround(z * static_cast<double>(n)));
    total += n;
  }
  report["tensor_sparsity"] = tensors;
  const std::string output_name =
      GlobalTensorName(model.config.tied_embeddings ? &ModelWeights::tok_embd : &ModelWeights::output);
  // 2:4 and 4:8 weights in Q8_0 are stored compressed (Q8_0_S24 and
  // Q8_0_S48: 5.5 bits per weight, kernels skip the zeros), and 2:4 in Q4_0
  // too (Q4_0_S24: 3.5 bits per weight), unless --dense-output asks for
  // plain Q8_0 / Q4_0.
  const bool compress24 = !structured && ctx.pattern.n == 2 && ctx.pattern.m == 4 && !a.dense_output;
  const bool compress48 = !structured && ctx.pattern.n == 4 && ctx.pattern.m == 8 && !a.dense_output;
  auto choose = [&](const std::string& name, const WeightMatrix& m) -> DType {
    DType t = m.type;
    if (target) {
      t = ChooseTensorType(*target, name, m.n_in, model.config.n_layer, output_name, false);
    } else if (auto it = stored.find(name); it != stored.end()) {
      DType s = it->second;
      if ((s == DType::kQ8_0S24 && !compress24) || (s == DType::kQ8_0S48 && !compress48)) s = DType::kQ8_0;
      if (s == DType::kQ4_0S24 && !compress24) s = DType::kQ4_0;
      t = FallbackForShape(s, m.n_in);
    }
    const bool pruned = std::any_of(ctx.mats.begin(), ctx.mats.end(), [&](const LayerMatrix& x) { return x.m == &m; });
    if (compress24 && pruned && t == DType::kQ8_0) return DType::kQ8_0S24;
    if (compress24 && pruned && t == DType::kQ4_0) return DType::kQ4_0S24;
    if (compress48 && pruned && t == DType::kQ8_0) return DType::kQ8_0S48;
    return t;
  };
  ModelWriteOptions wo;
  wo.embed_tokenizer = !model.gguf;
  wo.file_type = target ? target->base : model.weights->tok_embd.type;
  if (target) wo.llama_ftype = target->ftype;
  wo.show_progress = true;
  wo.extra_metadata = [&](GgufWriter* gw) {
    gw->SetString("infera.pruning.method", structured ? "structured-" + a.structured : a.method);
    if (!structured) {
      gw->SetString("infera.pruning.pattern", ctx.pattern.Name());
      gw->SetF32("infera.pruning.sparsity", static_cast<float>(report["sparsity"].get<double>()));
    }
  };
  auto sum = WriteModelGguf(*lm, choose, wo, a.paths[1]);
  if (!sum.ok()) return ReportError(sum.status());
  if (!a.report.empty()) {
    if (Status st = WriteFileAtomically(a.report, DumpJson(report, 1) + "\n"); !st.ok()) return ReportError(st);
  }
  auto size = FileSize(a.paths[1]);
  std::fprintf(stderr, "wrote %s: %.2f MiB; layer weights %.1f %% zeros\n", a.paths[1].c_str(),
               size.ok() ? *size / 1048576.0 : 0.0, total ? 100.0 * zeros / total : 0.0);
  return kExitOk;
}

}  // namespace

CommandFn RegisterPrune(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<PruneArgs>();
  app.add_option("paths", a->paths, "IN (GGUF, HF folder or llama2.c checkpoint) OUT.gguf")->required();
  app.add_option("--method", a->method, "magnitude, wanda (default) or sparsegpt");
  app.add_option("--sparsity", a->sparsity, "fraction of each layer matrix to zero, in (0, 1) (default 0.5)");
  app.add_option("--pattern", a->pattern, "unstructured (default), or N:M: keep N of every M weights (2:4, 4:8)");
  app.add_option("--calib", a->calib, "calibration text (wanda, sparsegpt, --structured, --steps; - reads stdin)");
  app.add_option("--calib-tokens", a->calib_tokens, "calibration tokens to use (default 4096)");
  app.add_option("--calib-ctx", a->calib_ctx, "tokens per calibration chunk (0: 256, or the trained context if shorter)");
  app.add_option("--skip", a->skip, "leave tensors matching this glob dense, e.g. '*attn_v*' (repeatable)");
  app.add_option("--outtype", a->outtype, "store the weights in this type (as quantize --type; default: as stored)");
  app.add_option("--structured", a->structured, "heads, ffn or both: remove whole KV groups / FFN channels");
  app.add_option("--ratio", a->ratio, "fraction of heads / channels to remove per layer (default 0.25)");
  app.add_option("--head-ratio", a->head_ratio, "heads only: fraction of KV groups to remove (default --ratio)");
  app.add_option("--ffn-ratio", a->ffn_ratio, "FFN only: fraction of channels to remove (default --ratio)");
  app.add_option("--steps", a->steps, "reach --sparsity in K equal increments, measuring hold-out perplexity");
  app.add_option("--max-ppl-increase", a->max_ppl_increase,
                 "with --steps: stop before the hold-out perplexity rises more than P percent");
  app.add_option("--damp", a->damp, "SparseGPT damping, a fraction of the mean Hessian diagonal (default 0.01), or auto: per "
                 "matrix the one of 0.01, 0.03, 0.1, 0.3 that best reproduces held-out calibration inputs");
  app.add_option("--block-size", a->block_size, "SparseGPT columns per block (default 128)");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use)");
  app.add_flag("--dense-output", a->dense_output,
               "2:4 / 4:8 in Q8_0, 2:4 in Q4_0: write plain Q8_0 / Q4_0 with the zeros (what llama.cpp reads) "
               "instead of infera's q8_0_s24 / q8_0_s48 / q4_0_s24");
  app.add_option("--report", a->report, "write a JSON report: per-tensor sparsity, steps, kept heads and channels");
  return [a, &rt]() { return Prune(*a, rt); };
}

}  // namespace infera::cli
