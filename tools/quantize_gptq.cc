#include "tools/quantize_gptq.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "base/logging.h"
#include "prune/model_pruning.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"
#include "tools/prune_calibration.h"

namespace infera::cli {

StatusOr<EncodedTensors> RunGptq(LoadedModel* lm, const TypeChooser& choose, const GptqRunOptions& o,
                                 const RuntimeOptions& rt) {
  Model& model = *lm->model;
  auto text = ReadTextArg(o.calib);
  if (!text.ok()) return text.status();
  const std::vector<int32_t> tokens = lm->tokenizer->Encode(*text, /*add_special=*/false, /*parse_special=*/false);
  const int32_t n_train = model.config.n_ctx_train;
  const int32_t n_ctx = o.calib_ctx > 0 ? o.calib_ctx : (n_train > 0 ? std::min(256, n_train) : 256);
  if (n_train > 0 && n_ctx > n_train) {
    return InvalidArgument(fmt::format("--calib-ctx {} is beyond the trained context {}", n_ctx, n_train));
  }
  if (tokens.size() < static_cast<size_t>(o.calib_tokens)) {
    return InvalidArgument(fmt::format("{} has {} tokens; --calib-tokens {} needs at least that many", o.calib,
                                       tokens.size(), o.calib_tokens));
  }
  const auto chunks = CalibrationChunks(tokens, 0, static_cast<size_t>(o.calib_tokens), n_ctx,
                                        lm->tokenizer->vocab().bos);
  RETURN_IF_ERROR(prune::MakeLayerMatricesF32(&model));
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return kernels.status();
  const int threads = ResolveThreads(o.threads);
  auto cal = Calibrator::Create(model, *lm->tokenizer, *kernels, threads, n_ctx);
  if (!cal.ok()) return cal.status();
  const auto mats = prune::LayerMatrices(&model);
  EncodedTensors out;
  const int n_layer = model.config.n_layer;
  const auto t0 = std::chrono::steady_clock::now();
  int rounded = 0;
  for (int l = 0; l < n_layer; ++l) {
    StatsCollector stats({l}, {}, /*with_hessian=*/true);
    RETURN_IF_ERROR((*cal)->Run(chunks, &stats));
    for (const prune::LayerMatrix& lmx : mats) {
      if (lmx.layer != l) continue;
      const std::string tensor = lmx.name.substr(0, lmx.name.find('['));
      WeightMatrix& m = *lmx.m;
      const DType type = choose(tensor, m);
      if (!GptqSupports(type) || !RowBytes(type, m.n_in) || m.n_in % o.gptq.group != 0) continue;
      auto* w = const_cast<float*>(reinterpret_cast<const float*>(m.data));
      std::vector<uint8_t> bytes(*RowBytes(type, m.n_in) * m.n_out);
      const prune::InputStats* s = stats.Find(l, lmx.input, lmx.expert);
      if (s == nullptr) {  // an expert no calibration token reached: plain rounding
        for (int64_t r = 0; r < m.n_out; ++r) {
          QuantizeRow(type, w + r * m.n_in, bytes.data() + r * (bytes.size() / m.n_out), m.n_in);
          DequantizeRow(type, bytes.data() + r * (bytes.size() / m.n_out), w + r * m.n_in, m.n_in);
        }
        ++rounded;
      } else {
        GptqOptions g = o.gptq;
        g.type = type;
        if (Status st = Gptq(w, m.n_out, m.n_in, s->hessian(), g, bytes.data(), threads); !st.ok()) {
          return Status(st.code(), lmx.name + ": " + st.message());
        }
      }
      auto& dst = out[tensor];  // parts and experts in row order
      dst.insert(dst.end(), bytes.begin(), bytes.end());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "gptq: layer %d/%d, %.1f s\n", l + 1, n_layer, secs);
  }
  if (rounded > 0) LOG_WARN("gptq: {} expert matrices saw no calibration token and were rounded to nearest", rounded);
  return out;
}

}  // namespace infera::cli
