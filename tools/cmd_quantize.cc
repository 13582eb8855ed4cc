// infera quantize IN OUT --type T: writes a llama.cpp-compatible GGUF whose
// weight matrices are stored in T (norms stay f32), with mixed precision by
// --keep PATTERN=TYPE, llama.cpp's presets (Q4_K_M, ...), its rule for the
// output tensor and its fallback for rows that do not fit a K-quant block.
// --imatrix F weights the rounding by an importance matrix (llama.cpp's
// importance-weighted algorithms; `infera imatrix` or llama-imatrix makes F).
// --type w8a8 writes infera's W8A8 type (int8 rows, per-token int8
// activations), with --smooth-alpha A SmoothQuant's smoothing folded in first.
#include <fnmatch.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "base/file_util.h"
#include "base/linalg.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "model/tensor_schema.h"
#include "quant/imatrix.h"
#include "quant/policy.h"
#include "quant/quantize.h"
#include "tools/commands.h"
#include "tools/model_writer.h"
#include "tools/quantize_gptq.h"
#include "tools/quantize_mix.h"

namespace infera::cli {
namespace {

struct QuantizeArgs {
  std::vector<std::string> paths;
  std::string type;
  std::vector<std::string> keep;
  bool pure = false;
  std::string tokenizer;
  std::string imatrix;
  std::string method = "rtn";
  std::string gptq_scales = "weighted";
  double target_bpw = 0;
  GptqRunOptions gptq;
  // llama-quantize's: the output tensor left in its source type, or given one;
  // the token embeddings given one.
  bool leave_output = false;
  std::string output_type, token_embd_type;
};

// llama-quantize's positional form, IN OUT TYPE [THREADS], into IN OUT with
// --type (and -t). An error names what was given twice or is not a count.
Status TakePositionalTypeAndThreads(QuantizeArgs* a) {
  if (a->paths.size() < 3 || a->paths.size() > 4) return Status::Ok();
  if (!a->type.empty()) {
    return InvalidArgument(
        fmt::format("the type is given twice: '{}' after the paths and --type {}", a->paths[2], a->type));
  }
  a->type = a->paths[2];
  if (a->paths.size() == 4) {
    const std::string& t = a->paths[3];
    char* end = nullptr;
    const long n = std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || n < 1 || n > 4096) {
      return InvalidArgument(
          fmt::format("'{}' after the type is not a thread count (llama-quantize's IN OUT TYPE "
                      "[THREADS])",
                      t));
    }
    if (a->gptq.threads != 0) return InvalidArgument(fmt::format("the threads are given twice: {} and -t", t));
    a->gptq.threads = static_cast<int>(n);
  }
  a->paths.resize(2);
  return Status::Ok();
}

// Every entry of `im` must name a weight matrix of the model with its input
// width (times the experts for stacked ones): an imatrix made for another
// model is refused rather than silently ignored.
Status CheckImatrixFitsModel(const Imatrix& im, const ModelConfig& c, const std::string& path) {
  std::map<std::string, int64_t> sizes;  // tensor -> values an entry must hold
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (!r.matrix) return;
    sizes[GgufTensorName(r, layer)] = DimSize(c, r.n_in, layer) * (IsExpertRole(r) ? c.n_expert : 1);
  });
  int matched = 0;
  for (const auto& [name, e] : im.entries) {
    auto it = sizes.find(name);
    if (it == sizes.end()) {
      return InvalidArgument(fmt::format("{}: entry {} is not a tensor of this model (an imatrix for another model?)",
                                         path, name));
    }
    if (static_cast<int64_t>(e.sum2.size()) != it->second) {
      return InvalidArgument(fmt::format("{}: entry {} has {} values, the model's tensor needs {} (an imatrix for "
                                         "another model?)", path, name, e.sum2.size(), it->second));
    }
    ++matched;
  }
  if (matched == 0) return InvalidArgument(path + ": the imatrix has no entries");
  return Status::Ok();
}

int Quantize(const QuantizeArgs& args, const RuntimeOptions& rt) {
  QuantizeArgs a = args;
  if (Status st = TakePositionalTypeAndThreads(&a); !st.ok()) return ReportError(st);
  if (a.paths.size() != 2) {
    return ReportError("usage: infera quantize IN OUT.gguf --type T (or llama-quantize's IN OUT.gguf T [THREADS])");
  }
  if (a.type.empty()) return ReportError("no type: pass --type T (e.g. --type q4_k_m), or IN OUT.gguf T");
  if (Status st = CheckOutputNotInput(a.paths[1], {a.paths[0], a.tokenizer, a.imatrix}); !st.ok()) {
    return ReportError(st);
  }
  const auto target = ParseQuantTarget(a.type);
  if (!target) {
    return ReportError("--type must be one of w8a8, q8_0, q6_k, q5_k_m, q5_k_s, q5_k, q5_1, q5_0, q4_k_m, q4_k_s, q4_k, "
                       "q4_1, q4_0, iq4_nl, iq4_xs, q3_k_m, q3_k, iq3_s, q2_k, iq2_xs, f16, bf16, f32");
  }
  if (target->base == DType::kIQ2_XS && a.imatrix.empty()) {
    return ReportError("--type iq2_xs needs --imatrix FILE (2-bit codebook rounding without importances is too "
                       "lossy; llama-quantize refuses it too)");
  }
  const bool gptq = a.method == "gptq";
  if (a.method != "rtn" && !gptq) return ReportError("--method must be rtn or gptq");
  const bool awq = a.gptq.awq;
  if (awq && a.gptq.calib.empty()) return ReportError("--awq needs --calib FILE (calibration text)");
  if (awq && !a.imatrix.empty()) return ReportError("--imatrix does not combine with --awq (it describes unscaled inputs)");
  if (awq && !GetDTypeInfo(target->base).quantized) return ReportError("--awq needs a quantized --type");
  if (awq && (a.gptq.awq_grid < 1 || a.gptq.awq_grid > 100)) return ReportError("--awq-grid must be in 1..100");
  if (gptq) {
    if (!GptqSupports(target->base)) {
      return ReportError("--method gptq writes q4_0, q4_1, q5_0, q5_1, q8_0, the k-quants or iq4_nl / iq4_xs, not " +
                         a.type);
    }
    if (a.gptq.calib.empty()) return ReportError("--method gptq needs --calib FILE (calibration text)");
    if (!a.imatrix.empty()) return ReportError("--imatrix applies to --method rtn (GPTQ uses its own Hessians)");
    const int g = a.gptq.gptq.group;
    if (g != 32 && g != 64 && g != 128) return ReportError("--group must be 32, 64 or 128");
    if (!(a.gptq.gptq.damp > 0 && a.gptq.gptq.damp < 10)) return ReportError("--damp must be in (0, 10)");
  }
  if (gptq || awq) {
    if (Status st = LoadLinalg(); !st.ok()) return ReportError(st);  // OpenBLAS, before any work
  }
  const bool smooth = a.gptq.smooth_alpha >= 0;
  if (smooth || a.gptq.smooth_alpha != -1) {
    if (target->base != DType::kW8A8) return ReportError("--smooth-alpha applies to --type w8a8");
    if (!(a.gptq.smooth_alpha >= 0 && a.gptq.smooth_alpha <= 1)) return ReportError("--smooth-alpha must be in [0, 1]");
    if (a.gptq.calib.empty()) return ReportError("--smooth-alpha needs --calib FILE (calibration text)");
    if (awq) return ReportError("--smooth-alpha does not combine with --awq (both rescale the same channels)");
  }
  const bool outliers = a.gptq.outlier_threshold != 0;
  if (outliers) {
    if (target->base != DType::kW8A8) return ReportError("--outlier-threshold applies to --type w8a8");
    if (!(a.gptq.outlier_threshold > 0 && a.gptq.outlier_threshold < 1e30)) {
      return ReportError("--outlier-threshold must be a positive activation magnitude (LLM.int8() uses 6)");
    }
    if (a.gptq.calib.empty()) return ReportError("--outlier-threshold needs --calib FILE (calibration text)");
    if (awq) return ReportError("--outlier-threshold does not combine with --awq");
  }
  const bool w8a8_calib = smooth || outliers;
  if (target->base == DType::kW8A8 && !a.imatrix.empty()) {
    return ReportError("--imatrix has no effect on w8a8 (one scale per row: nothing to weigh)");
  }
  const bool mix = a.target_bpw > 0;
  if (mix) {
    if (gptq || awq) return ReportError("--target-bpw combines with rtn and --imatrix, not with gptq or awq yet");
    if (a.gptq.calib.empty()) return ReportError("--target-bpw needs --calib FILE (text to measure KL divergence on)");
    if (a.target_bpw < 2 || a.target_bpw > 8.5) return ReportError("--target-bpw must be in [2, 8.5]");
  }
  if (gptq || awq || mix || w8a8_calib) {
    if (a.gptq.calib_tokens < 16) return ReportError("--calib-tokens must be >= 16");
    if (Status st = CheckOutputNotInput(a.paths[1], {a.gptq.calib}); !st.ok()) return ReportError(st);
  }
  struct Rule {
    std::string pattern;
    DType type;
    bool source = false;  // keep the tensor's source type (--leave-output-tensor)
  };
  std::vector<Rule> rules;
  for (const auto& k : a.keep) {
    const auto eq = k.rfind('=');
    if (eq == std::string::npos || eq == 0) return ReportError("--keep takes PATTERN=TYPE, e.g. output.weight=q8_0");
    auto t = ParseDTypeName(k.substr(eq + 1));
    if (!t || !CanQuantize(*t)) return ReportError("--keep: cannot write type '" + k.substr(eq + 1) + "'");
    rules.push_back({k.substr(0, eq), *t});
  }
  if (a.leave_output && !a.output_type.empty()) {
    return ReportError("--leave-output-tensor and --output-tensor-type both set the output tensor's type; give one");
  }
  // --output-tensor-type / --token-embedding-type: after --keep's rules
  // (the output tensor's name is known once the model is loaded, below).
  std::optional<DType> output_type, token_embd_type;
  for (const auto& [flag, name, out] : {std::tuple{"--output-tensor-type", &a.output_type, &output_type},
                                        std::tuple{"--token-embedding-type", &a.token_embd_type, &token_embd_type}}) {
    if (name->empty()) continue;
    auto t = ParseDTypeName(*name);
    if (!t || !CanQuantize(*t)) return ReportError(fmt::format("{}: cannot write type '{}'", flag, *name));
    *out = *t;
  }
  std::optional<Imatrix> im;
  if (!a.imatrix.empty()) {
    auto loaded = Imatrix::Load(a.imatrix);
    if (!loaded.ok()) return ReportError(loaded.status());
    im = std::move(loaded).value();
  }
  auto lm = LoadModelAndTokenizer(a.paths[0], a.tokenizer, gptq || awq || mix || w8a8_calib);
  if (!lm.ok()) return ReportError(lm.status());
  if (im) {
    if (Status st = CheckImatrixFitsModel(*im, lm->model->config, a.imatrix); !st.ok()) return ReportError(st);
  }
  const bool tied = lm->model->config.tied_embeddings;
  const int n_layer = lm->model->config.n_layer;
  // The tensor that produces the logits gets llama.cpp's rule (Q6_K).
  const std::string output_name = GlobalTensorName(tied ? &ModelWeights::tok_embd : &ModelWeights::output);
  std::map<std::string, DType> plan;  // --target-bpw
  if (mix) {
    MixOptions mo;
    mo.target_bpw = a.target_bpw;
    mo.calib = a.gptq.calib;
    mo.calib_tokens = a.gptq.calib_tokens == 4096 ? 2048 : a.gptq.calib_tokens;
    mo.calib_ctx = a.gptq.calib_ctx;
    mo.threads = a.gptq.threads;
    auto p = PlanMixedPrecision(&*lm, mo, im ? &*im : nullptr, rt);
    if (!p.ok()) return ReportError(p.status());
    plan = std::move(p).value();
  }
  // llama-quantize's flags for the output tensor (the token embeddings when
  // they are tied) and the token embeddings.
  if (a.leave_output) rules.push_back({output_name, DType::kF32, /*source=*/true});
  if (output_type) rules.push_back({output_name, *output_type});
  if (token_embd_type) rules.push_back({GlobalTensorName(&ModelWeights::tok_embd), *token_embd_type});
  auto choose = [&](const std::string& name, const WeightMatrix& m) -> DType {
    for (const auto& r : rules) {
      if (fnmatch(r.pattern.c_str(), name.c_str(), 0) != 0) continue;
      return r.source ? m.type : FallbackForShape(r.type, m.n_in);
    }
    if (auto it = plan.find(name); it != plan.end()) return it->second;
    return ChooseTensorType(*target, name, m.n_in, n_layer, output_name, a.pure);
  };
  EncodedTensors encoded;
  if (gptq || awq) {
    GptqRunOptions o = a.gptq;
    o.gptq_enabled = gptq;
    o.gptq.weighted_scales = a.gptq_scales == "weighted";
    auto enc = RunCalibrated(&*lm, choose, o, rt);
    if (!enc.ok()) return ReportError(enc.status());
    encoded = std::move(enc).value();
  }
  OutlierTensors outlier_tensors;
  if (w8a8_calib) {
    auto rep = RunW8A8Calibration(&*lm, a.gptq, rt, &outlier_tensors);
    if (!rep.ok()) return ReportError(rep.status());
    if (smooth) {
      std::fprintf(stderr,
                   "smoothquant: alpha %.2f, %d input groups smoothed; largest channel max / median channel max: "
                   "%.1f -> %.1f (worst group), %.1f -> %.1f (mean)\n",
                   a.gptq.smooth_alpha, rep->groups, rep->peak_before, rep->peak_after, rep->mean_peak_before,
                   rep->mean_peak_after);
    }
    if (outliers) {
      std::fprintf(stderr, "outliers: %lld of %lld input channels above %g kept in f16 (%d of %d input groups)\n",
                   static_cast<long long>(rep->outlier_cols), static_cast<long long>(rep->input_cols),
                   a.gptq.outlier_threshold, rep->outlier_groups, rep->groups);
    }
  }
  ModelWriteOptions wo;
  if (w8a8_calib) {
    wo.extra_metadata = [&a, smooth, outliers](GgufWriter* w) {
      w->SetString("quantize.calibration.file", a.gptq.calib);
      if (smooth) w->SetF32("quantize.smoothquant.alpha", static_cast<float>(a.gptq.smooth_alpha));
      if (outliers) w->SetF32("quantize.outlier_threshold", static_cast<float>(a.gptq.outlier_threshold));
    };
    // Each matrix's outlier columns beside it: NAME.outlier_cols (i32 [k])
    // and NAME.outlier_weight (f16 [k, n_out]), NAME without ".weight".
    wo.extra_tensors = [&outlier_tensors](GgufWriter* w) {
      for (const auto& [name, t] : outlier_tensors) {
        const int64_t k = static_cast<int64_t>(t.cols.size());
        w->AddTensor(OutlierColsTensorName(name), DType::kI32, {k}, reinterpret_cast<const uint8_t*>(t.cols.data()),
                     k * 4);
        w->AddTensor(OutlierWeightTensorName(name), DType::kF16, {k, t.n_out},
                     reinterpret_cast<const uint8_t*>(t.weight_f16.data()), t.weight_f16.size() * 2);
      }
    };
  }
  if (gptq || awq) {
    wo.encoded = [&encoded](const std::string& name) -> const std::vector<uint8_t>* {
      auto it = encoded.find(name);
      return it == encoded.end() ? nullptr : &it->second;
    };
    wo.extra_metadata = [&a, gptq, awq](GgufWriter* w) {
      w->SetString("quantize.calibration.file", a.gptq.calib);
      w->SetBool("quantize.awq", awq);
      if (!gptq) return;
      w->SetI32("quantize.gptq.group", a.gptq.gptq.group);
      w->SetString("quantize.gptq.scales", a.gptq_scales);
      w->SetBool("quantize.gptq.act_order", a.gptq.gptq.act_order);
      w->SetF32("quantize.gptq.damp", static_cast<float>(a.gptq.gptq.damp));
      w->SetBool("quantize.gptq.true_sequential", a.gptq.true_sequential);
    };
  }
  wo.embed_tokenizer = !lm->model->gguf || !a.tokenizer.empty();
  wo.file_type = target->base;
  wo.llama_ftype = target->ftype;
  wo.show_progress = true;
  if (im) {
    wo.importance = [&im](const std::string& name) { return im->Importance(name); };
    // What llama-quantize records about the imatrix it used.
    wo.extra_metadata = [&im, &a](GgufWriter* w) {
      w->SetString("quantize.imatrix.file", a.imatrix);
      if (!im->datasets.empty()) w->SetString("quantize.imatrix.dataset", im->datasets.back());
      w->SetI32("quantize.imatrix.entries_count", static_cast<int32_t>(im->entries.size()));
      w->SetI32("quantize.imatrix.chunks_count", static_cast<int32_t>(im->chunk_count));
    };
  }
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

CommandFn RegisterQuantize(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("paths", a->paths,
                 "IN (GGUF, HF folder or llama2.c checkpoint) OUT.gguf, or llama-quantize's IN OUT.gguf TYPE [THREADS]")
      ->required();
  app.add_option("--type", a->type,
                 "a type (w8a8, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, iq4_nl, iq4_xs, q3_k, iq3_s, q2_k, "
                 "iq2_xs, f16, bf16, f32) or a "
                 "llama.cpp mixture (q5_k_m, q5_k_s, q4_k_m, q4_k_s, q3_k_m)");
  app.add_flag("--leave-output-tensor", a->leave_output,
               "keep the output tensor (the token embeddings when tied) in its source type (llama-quantize's flag)");
  app.add_option("--output-tensor-type", a->output_type, "the output tensor's type (llama-quantize's flag)");
  app.add_option("--token-embedding-type", a->token_embd_type, "the token embeddings' type (llama-quantize's flag)");
  app.add_option("--keep", a->keep, "PATTERN=TYPE: store tensors whose name matches the glob in TYPE (repeatable)");
  app.add_flag("--pure", a->pure, "every weight matrix in --type, the output tensor too (llama-quantize --pure)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer to embed (llama2.c checkpoints)");
  app.add_option("--imatrix", a->imatrix,
                 "importance matrix (GGUF or legacy .dat, from `infera imatrix` or llama-imatrix): llama.cpp's "
                 "importance-weighted rounding for the tensors it covers");
  app.add_option("--method", a->method,
                 "rtn (round to nearest, llama-quantize's algorithms; default) or gptq (error feedback through "
                 "calibration Hessians, layer by layer; q4_0, q4_1, q5_0, q5_1, q8_0)");
  app.add_flag("--awq", a->gptq.awq,
               "activation-aware scaling before rounding (with rtn or gptq): per-channel scales searched on --calib "
               "and folded into the norms and ffn_up, so the file stays plain GGUF");
  app.add_option("--target-bpw", a->target_bpw,
                 "mixed precision: per-tensor types chosen by measured sensitivity (KLD on --calib) under this many "
                 "bits per weight of the layer tensors; prints the plan (--type still sets the output tensor's rule)");
  app.add_option("--smooth-alpha", a->gptq.smooth_alpha,
                 "w8a8: SmoothQuant, alpha in [0, 1] (0.5 is the paper's default): activation outliers moved into "
                 "the weights by per-channel factors found on --calib and folded into the norms and ffn_up");
  app.add_option("--outlier-threshold", a->gptq.outlier_threshold,
                 "w8a8: LLM.int8()-style outliers, input channels whose calibration |x| exceeds this (6 in the "
                 "paper) stay in f16 and run beside the int8 product (needs --calib)");
  app.add_option("--awq-grid", a->gptq.awq_grid, "awq: scale exponents tried (default 20)");
  app.add_option("--calib", a->gptq.calib, "gptq, awq, smooth-alpha, outlier-threshold: calibration text (- reads stdin)");
  app.add_option("--calib-tokens", a->gptq.calib_tokens, "gptq, awq: calibration tokens to use (default 4096)");
  app.add_option("--calib-ctx", a->gptq.calib_ctx, "gptq, awq: tokens per calibration chunk (0: 256, or the trained context)");
  app.add_option("--group", a->gptq.gptq.group, "gptq: columns sharing a scale in legacy-block tensors (q4_0 .. q8_0), 32 (default), 64 or 128; k-quant and iq4 tensors fit their own blocks");
  app.add_flag("--act-order", a->gptq.gptq.act_order,
               "gptq: quantize columns in order of decreasing Hessian diagonal (groups' scales from the original weights)");
  app.add_flag("--true-sequential", a->gptq.true_sequential,
               "gptq: one calibration pass per stage of each layer (Q/K/V, attention output, gate/up, down), each "
               "seeing the earlier stages quantized, instead of one per layer");
  app.add_option("--gptq-scales", a->gptq_scales,
                 "gptq, legacy types with --group 32: each block's scale by min/max (minmax) or by the type's "
                 "importance-weighted search (weighted, the default); k-quants and iq4 always use their weighted search")
      ->check(CLI::IsMember({"minmax", "weighted"}));
  app.add_option("--damp", a->gptq.gptq.damp, "gptq: damping, a fraction of the mean Hessian diagonal (default 0.01)");
  app.add_option("-t,--threads", a->gptq.threads, "threads (0: the cores this process may use)");
  return [a, &rt]() { return Quantize(*a, rt); };
}

}  // namespace infera::cli
