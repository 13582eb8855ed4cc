#include "tools/quantize_gptq.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "base/linalg.h"
#include "base/logging.h"
#include "prune/model_pruning.h"
#include "quant/awq.h"
#include "quant/quantize.h"
#include "quant/smoothquant.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"
#include "tools/prune_calibration.h"

namespace infera::cli {

namespace {

// Rescales a Hessian of inputs x to that of x / s: h_ij / (s_i s_j).
void ScaleHessian(std::vector<double>* h, const std::vector<float>& s) {
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) (*h)[i * n + j] /= static_cast<double>(s[i]) * s[j];
  }
}

float* Mutable(const WeightMatrix& m) { return const_cast<float*>(reinterpret_cast<const float*>(m.data)); }

// One AWQ group: matrices reading the same input; `fold` divides the scales
// out of the input (a norm weight, or the rows of the matrix producing it).
struct AwqGroup {
  LinearInput input;
  std::vector<WeightMatrix*> mats;
  std::vector<float>* norm = nullptr;   // divide by s
  WeightMatrix* producer = nullptr;     // or divide its rows by s
};

// Scales the group's matrices' columns by s and divides it out of the input.
void FoldScales(const AwqGroup& g, const std::vector<float>& s) {
  const int64_t cols = g.mats[0]->n_in;
  for (WeightMatrix* m : g.mats) {
    float* w = Mutable(*m);
    for (int64_t row = 0; row < m->n_out; ++row) {
      for (int64_t j = 0; j < cols; ++j) w[row * cols + j] *= s[j];
    }
  }
  if (g.norm != nullptr) {
    for (int64_t j = 0; j < cols; ++j) (*g.norm)[j] /= s[j];
  } else {
    float* p = Mutable(*g.producer);
    for (int64_t row = 0; row < g.producer->n_out; ++row) {
      for (int64_t j = 0; j < g.producer->n_in; ++j) p[row * g.producer->n_in + j] /= s[row];
    }
  }
}

// Finds s for the group, scales the matrices' columns by it and divides it
// out of the input. Returns s (empty: skipped).
StatusOr<std::vector<float>> ApplyAwq(const AwqGroup& g, const std::vector<double>& h, const TypeChooser& choose,
                                      const std::map<const WeightMatrix*, std::string>& names, int grid, int threads,
                                      double* gain) {
  std::vector<AwqMatrix> am;
  const int64_t cols = g.mats[0]->n_in;
  for (WeightMatrix* m : g.mats) {
    const DType t = choose(names.at(m), *m);
    if (!GetDTypeInfo(t).quantized || !RowBytes(t, cols)) return std::vector<float>{};  // kept in float: no need
    am.push_back({Mutable(*m), m->n_out, t});
  }
  auto r = AwqSearch(am, h, cols, grid, threads);
  if (!r.ok()) return r.status();
  *gain = r->loss_plain > 0 ? r->loss / r->loss_plain : 1.0;
  FoldScales(g, r->scales);
  return std::move(r->scales);
}

// SmoothQuant's matrix groups of a layer (those AWQ scales too).
std::vector<AwqGroup> InputGroups(LayerWeights& L) {
  return {{LinearInput::kAttnIn, {&L.wq, &L.wk, &L.wv}, &L.attn_norm, nullptr},
          {LinearInput::kFfnIn, {&L.w_gate, &L.w_up}, &L.ffn_norm, nullptr},
          {LinearInput::kFfnMid, {&L.w_down}, nullptr, &L.w_up}};
}

}  // namespace

StatusOr<W8A8Report> RunW8A8Calibration(LoadedModel* lm, const GptqRunOptions& o, const RuntimeOptions& rt,
                                        OutlierTensors* outliers) {
  Model& model = *lm->model;
  const ModelConfig& c = model.config;
  if (!c.pre_norm || c.fused_qkv || c.fused_gate_up || c.moe()) {
    return InvalidArgument("--smooth-alpha and --outlier-threshold need pre-norm blocks with separate Q/K/V and "
                           "gate/up projections and no experts");
  }
  auto session = StartCalibration(lm, o.calib, o.calib_tokens, o.calib_ctx, o.threads, rt);
  if (!session.ok()) return session.status();
  // Smoothing leaves every float activation as it was (x / s times W diag(s)),
  // so one pass over the calibration text gives every layer's maxima.
  StatsCollector stats({}, {LinearInput::kAttnIn, LinearInput::kFfnIn, LinearInput::kFfnMid}, /*with_hessian=*/false);
  RETURN_IF_ERROR((*session)->calibrator->Run((*session)->chunks, &stats));
  std::map<const WeightMatrix*, std::string> names;
  for (const auto& lmx : prune::LayerMatrices(&model)) names[lmx.m] = lmx.name.substr(0, lmx.name.find('['));
  W8A8Report rep;
  double sum_before = 0, sum_after = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    for (const AwqGroup& g : InputGroups(model.weights->layers[l])) {
      const prune::InputStats* s = stats.Find(l, g.input, -1);
      if (s == nullptr) continue;
      const int64_t cols = g.mats[0]->n_in;
      std::vector<SmoothMatrix> sm;
      for (WeightMatrix* m : g.mats) sm.push_back({Mutable(*m), m->n_out});
      const std::vector<float> sc = o.smooth_alpha >= 0 ? SmoothQuantScales(s->abs_max(), sm, cols, o.smooth_alpha)
                                                        : std::vector<float>(cols, 1.0f);
      // How far the largest channel stands above the median one, before and
      // after: what per-token int8 activations suffer from.
      std::vector<float> before = s->abs_max(), after(cols);
      for (int64_t j = 0; j < cols; ++j) after[j] = before[j] / sc[j];
      auto peak = [](std::vector<float> v) {
        const float mx = *std::max_element(v.begin(), v.end());
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2] > 0 ? mx / v[v.size() / 2] : 1.0f;
      };
      const double pb = peak(before), pa = peak(after);
      rep.peak_before = std::max(rep.peak_before, pb);
      rep.peak_after = std::max(rep.peak_after, pa);
      sum_before += pb;
      sum_after += pa;
      if (o.smooth_alpha >= 0) FoldScales(g, sc);  // (outliers alone: s = 1, nothing to fold)
      ++rep.groups;
      rep.input_cols += cols;
      if (o.outlier_threshold <= 0) continue;
      std::vector<int32_t> out_cols;
      for (int64_t j = 0; j < cols; ++j) {
        if (after[j] > o.outlier_threshold) out_cols.push_back(static_cast<int32_t>(j));
      }
      if (out_cols.empty()) continue;
      ++rep.outlier_groups;
      rep.outlier_cols += static_cast<int64_t>(out_cols.size());
      const int64_t k = static_cast<int64_t>(out_cols.size());
      for (WeightMatrix* m : g.mats) {
        OutlierTensor& t = (*outliers)[names.at(m)];
        t.cols = out_cols;
        t.n_out = m->n_out;
        t.weight_f16.resize(m->n_out * k);
        float* w = Mutable(*m);
        for (int64_t r = 0; r < m->n_out; ++r) {
          for (int64_t j = 0; j < k; ++j) {
            t.weight_f16[r * k + j] = Fp32ToFp16(w[r * cols + out_cols[j]]);
            w[r * cols + out_cols[j]] = 0.0f;
          }
        }
      }
    }
  }
  if (rep.groups > 0) {
    rep.mean_peak_before = sum_before / rep.groups;
    rep.mean_peak_after = sum_after / rep.groups;
  }
  return rep;
}

StatusOr<EncodedTensors> RunCalibrated(LoadedModel* lm, const TypeChooser& choose, const GptqRunOptions& o,
                                       const RuntimeOptions& rt) {
  Model& model = *lm->model;
  const ModelConfig& c = model.config;
  if (o.awq && (!c.pre_norm || c.fused_qkv || c.fused_gate_up || c.moe())) {
    return InvalidArgument("--awq needs pre-norm blocks with separate Q/K/V and gate/up projections and no experts");
  }
  auto session = StartCalibration(lm, o.calib, o.calib_tokens, o.calib_ctx, o.threads, rt);
  if (!session.ok()) return session.status();
  const auto& chunks = (*session)->chunks;
  Calibrator* cal = (*session)->calibrator.get();
  const int threads = (*session)->threads;
  SetLinalgThreads(threads);
  const auto mats = prune::LayerMatrices(&model);
  std::map<const WeightMatrix*, std::string> names;
  for (const auto& lmx : mats) names[lmx.m] = lmx.name.substr(0, lmx.name.find('['));
  EncodedTensors out;
  double awq_gain = 0;
  int awq_groups = 0;
  const int n_layer = model.config.n_layer;
  const auto t0 = std::chrono::steady_clock::now();
  int rounded = 0;
  // A layer's inputs in forward order. True-sequential GPTQ collects each
  // stage's Hessians after the earlier stages' matrices hold their quantized
  // weights (one calibration pass per stage); otherwise one pass per layer.
  using LI = LinearInput;
  const std::vector<std::vector<LinearInput>> stages =
      o.true_sequential ? std::vector<std::vector<LinearInput>>{{LI::kAttnIn}, {LI::kAttnOut}, {LI::kFfnIn, LI::kExpertIn},
                                                                {LI::kFfnMid, LI::kExpertMid, LI::kSharedMid}}
                        : std::vector<std::vector<LinearInput>>{{}};
  for (int l = 0; l < n_layer; ++l) {
    std::unique_ptr<StatsCollector> layer_stats;  // every input of the layer, before any change to it
    if (o.awq || !o.true_sequential) {
      layer_stats = std::make_unique<StatsCollector>(std::vector<int>{l}, std::vector<LinearInput>{}, true);
      RETURN_IF_ERROR(cal->RunLayer(chunks, l, layer_stats.get()));
    }
    // AWQ scales per input (with one pass per layer, the Hessians of the
    // scaled inputs for GPTQ).
    std::map<LinearInput, std::vector<float>> scales;
    if (o.awq) {
      for (const AwqGroup& g : InputGroups(model.weights->layers[l])) {
        const prune::InputStats* s = layer_stats->Find(l, g.input, -1);
        if (s == nullptr) continue;
        double gain = 1;
        auto sc = ApplyAwq(g, s->hessian(), choose, names, o.awq_grid, threads, &gain);
        if (!sc.ok()) return sc.status();
        if (sc->empty()) continue;
        scales[g.input] = std::move(sc).value();
        awq_gain += gain;
        ++awq_groups;
      }
    }
    if (!o.gptq_enabled) {
      std::fprintf(stderr, "awq: layer %d/%d\n", l + 1, n_layer);
      continue;
    }
    for (const std::vector<LinearInput>& stage : stages) {
      const StatsCollector* stats = layer_stats.get();
      std::unique_ptr<StatsCollector> stage_stats;
      if (o.true_sequential) {
        stage_stats = std::make_unique<StatsCollector>(std::vector<int>{l}, stage, true);
        RETURN_IF_ERROR(cal->RunLayer(chunks, l, stage_stats.get()));
        stats = stage_stats.get();
      }
      for (const prune::LayerMatrix& lmx : mats) {
        if (lmx.layer != l) continue;
        if (!stage.empty() && std::find(stage.begin(), stage.end(), lmx.input) == stage.end()) continue;
        const std::string tensor = lmx.name.substr(0, lmx.name.find('['));
        WeightMatrix& m = *lmx.m;
        const DType type = choose(tensor, m);
        if (!GptqSupports(type) || !RowBytes(type, m.n_in) || m.n_in % GptqGroupColumns(type, o.gptq.group) != 0) {
          continue;
        }
        auto* w = const_cast<float*>(reinterpret_cast<const float*>(m.data));
        std::vector<uint8_t> bytes(*RowBytes(type, m.n_in) * m.n_out);
        const prune::InputStats* s = stats->Find(l, lmx.input, lmx.expert);
        if (s == nullptr) {  // an expert no calibration token reached: plain rounding
          for (int64_t r = 0; r < m.n_out; ++r) {
            QuantizeRow(type, w + r * m.n_in, bytes.data() + r * (bytes.size() / m.n_out), m.n_in);
            DequantizeRow(type, bytes.data() + r * (bytes.size() / m.n_out), w + r * m.n_in, m.n_in);
          }
          ++rounded;
        } else {
          GptqOptions g = o.gptq;
          g.type = type;
          std::vector<double> h = s->hessian();
          if (auto it = scales.find(lmx.input); it != scales.end() && !o.true_sequential) ScaleHessian(&h, it->second);
          if (Status st = Gptq(w, m.n_out, m.n_in, std::move(h), g, bytes.data(), threads); !st.ok()) {
            return Status(st.code(), lmx.name + ": " + st.message());
          }
        }
        auto& dst = out[tensor];  // parts and experts in row order
        dst.insert(dst.end(), bytes.begin(), bytes.end());
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "gptq: layer %d/%d, %.1f s\n", l + 1, n_layer, secs);
  }
  if (awq_groups > 0) {
    std::fprintf(stderr, "awq: %d input groups scaled; their rounding loss on the calibration data %.2fx plain "
                 "rounding's on average\n", awq_groups, awq_gain / awq_groups);
  }
  if (rounded > 0) LOG_WARN("gptq: {} expert matrices saw no calibration token and were rounded to nearest", rounded);
  return out;
}

}  // namespace infera::cli
