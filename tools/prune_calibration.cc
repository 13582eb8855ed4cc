#include "tools/prune_calibration.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <fmt/format.h>

#include "base/logging.h"
#include "model/decoder.h"
#include "prune/model_pruning.h"

namespace infera::cli {
namespace {

// A decoder runner that shows its activations to *observer and lets *tap
// start and stop its passes part-way (both read at every call, so the
// calibrator can switch them between runs; null: none).
class ObservedRunner : public ModelRunner, private ActivationObserver, private ResidualTap {
 public:
  ObservedRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool, int n_ctx,
                 ActivationObserver* const* observer, ResidualTap* const* tap)
      : runner_(model, kernels, pool, n_ctx), observer_(observer), tap_(tap) {
    runner_.set_observer(this);
    runner_.set_residual_tap(this);
  }
  Status Forward(const ForwardBatch& b, KvStorage& kv, std::vector<float>* logits) override {
    return runner_.Forward(b, kv, logits);
  }

 private:
  bool Wants(int l) const override { return *observer_ != nullptr && (*observer_)->Wants(l); }
  void Observe(int l, LinearInput w, int e, const float* x, int64_t rows, int64_t width) override {
    (*observer_)->Observe(l, w, e, x, rows, width);
  }
  int ResumeAt(float* x, int64_t rows, int64_t width) override {
    return *tap_ != nullptr ? (*tap_)->ResumeAt(x, rows, width) : 0;
  }
  int StopBefore() const override { return *tap_ != nullptr ? (*tap_)->StopBefore() : INT_MAX; }
  void BlockInput(int b, const float* x, int64_t rows, int64_t width) override {
    if (*tap_ != nullptr) (*tap_)->BlockInput(b, x, rows, width);
  }

  DecoderRunner runner_;
  ActivationObserver* const* observer_;
  ResidualTap* const* tap_;
};

}  // namespace

std::vector<std::vector<int32_t>> CalibrationChunks(const std::vector<int32_t>& tokens, size_t from, size_t to,
                                                    int32_t n_ctx, int32_t bos) {
  std::vector<std::vector<int32_t>> out;
  const size_t body = static_cast<size_t>(n_ctx) - (bos >= 0 ? 1 : 0);
  for (size_t at = from; at + 1 < to; at += body) {
    std::vector<int32_t> c;
    if (bos >= 0) c.push_back(bos);
    c.insert(c.end(), tokens.begin() + at, tokens.begin() + std::min(to, at + body));
    if (c.size() >= 2) out.push_back(std::move(c));
  }
  return out;
}

StatsCollector::StatsCollector(std::vector<int> layers, std::vector<LinearInput> inputs, bool with_hessian)
    : layers_(std::move(layers)), inputs_(std::move(inputs)), with_hessian_(with_hessian) {}

bool StatsCollector::Wants(int layer) const {
  return layers_.empty() || std::find(layers_.begin(), layers_.end(), layer) != layers_.end();
}

void StatsCollector::Observe(int layer, LinearInput which, int expert, const float* x, int64_t rows, int64_t width) {
  if (!inputs_.empty() && std::find(inputs_.begin(), inputs_.end(), which) == inputs_.end()) return;
  auto& s = stats_[Key{layer, which, expert}];
  if (!s) s = std::make_unique<prune::InputStats>(width, with_hessian_);
  s->Add(x, rows);
}

const prune::InputStats* StatsCollector::Find(int layer, LinearInput which, int expert) const {
  auto it = stats_.find(Key{layer, which, expert});
  return it == stats_.end() || it->second->tokens() == 0 ? nullptr : it->second.get();
}

StatusOr<std::unique_ptr<Calibrator>> Calibrator::Create(const Model& model, const Tokenizer& tok,
                                                         const KernelTable& kernels, int threads, int32_t n_ctx) {
  std::unique_ptr<Calibrator> c(new Calibrator());
  EngineOptions eo;
  eo.threads = threads;
  eo.max_num_seqs = 1;
  eo.max_batched_tokens = n_ctx;
  eo.max_model_len = n_ctx;
  eo.prefix_caching = false;  // the weights change between runs
  Calibrator* self = c.get();
  ModelRunnerFactory factory = [self, &model, &kernels, n_ctx](ThreadPool& pool) -> std::unique_ptr<ModelRunner> {
    return std::make_unique<ObservedRunner>(model, kernels, pool, n_ctx, &self->observer_, &self->tap_);
  };
  auto engine = Engine::Create(model, &tok, kernels, eo, factory);
  if (!engine.ok()) return engine.status();
  c->engine_ = std::move(engine).value();
  c->n_vocab_ = model.config.n_vocab;
  return c;
}

Status Calibrator::Run(const std::vector<std::vector<int32_t>>& chunks, ActivationObserver* observer) {
  observer_ = observer;
  RequestParams rp;
  rp.max_tokens = 0;
  Status st;
  for (const auto& chunk : chunks) {
    rp.prompt_logits_from = static_cast<int32_t>(chunk.size()) - 1;
    auto res = RunRequest(*engine_, chunk, rp);
    if (!res.ok()) {
      st = res.status();
      break;
    }
  }
  observer_ = nullptr;
  return st;
}

template <typename Fn>
Status Calibrator::ForEachScoredRow(const std::vector<std::vector<int32_t>>& chunks, Fn&& fn) {
  RequestParams rp;
  rp.max_tokens = 0;
  for (const auto& chunk : chunks) {
    const int32_t n = static_cast<int32_t>(chunk.size()), first = n / 2;
    rp.prompt_logits_from = first;
    auto res = RunRequest(*engine_, chunk, rp);
    if (!res.ok()) return res.status();
    for (int32_t j = 0; first + j + 1 < n; ++j) {
      const float* row = res->prompt_logits.data() + static_cast<size_t>(j) * n_vocab_;
      const float mx = *std::max_element(row, row + n_vocab_);
      double sum = 0;
      for (int32_t i = 0; i < n_vocab_; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
      fn(row, mx + std::log(sum), chunk[first + j + 1]);
    }
  }
  return Status::Ok();
}

StatusOr<double> Calibrator::Perplexity(const std::vector<std::vector<int32_t>>& chunks) {
  double nll = 0;
  int64_t count = 0;
  RETURN_IF_ERROR(ForEachScoredRow(chunks, [&](const float* row, double lse, int32_t next) {
    nll += lse - row[next];
    ++count;
  }));
  if (count == 0) return InvalidArgument("the hold-out is too short to score");
  return std::exp(nll / static_cast<double>(count));
}

StatusOr<std::vector<float>> Calibrator::LogProbRows(const std::vector<std::vector<int32_t>>& chunks) {
  std::vector<float> out;
  RETURN_IF_ERROR(ForEachScoredRow(chunks, [&](const float* row, double lse, int32_t) {
    for (int32_t i = 0; i < n_vocab_; ++i) out.push_back(static_cast<float>(row[i] - lse));
  }));
  return out;
}

StatusOr<std::vector<float>> Calibrator::LogProbRowsKeepingBlockInputs(
    const std::vector<std::vector<int32_t>>& chunks) {
  block_inputs_.StartRun(BlockInputCache::Mode::kKeep);
  tap_ = &block_inputs_;
  auto rows = LogProbRows(chunks);
  tap_ = nullptr;
  return rows;
}

StatusOr<std::vector<float>> Calibrator::LogProbRowsFromBlock(const std::vector<std::vector<int32_t>>& chunks,
                                                              int block) {
  block_inputs_.StartRun(BlockInputCache::Mode::kResume, block);
  tap_ = &block_inputs_;
  auto rows = LogProbRows(chunks);
  tap_ = nullptr;
  return rows;
}

Status Calibrator::RunLayer(const std::vector<std::vector<int32_t>>& chunks, int layer, ActivationObserver* observer) {
  BlockInputCache& cache = layer_inputs_[&chunks];
  // Layer l - 1's input, kept by the passes for layer l - 1 (or l): layer
  // l - 1 may have changed since, what precedes it may not. Layer l's FFN
  // is the last block observed.
  cache.StartRun(BlockInputCache::Mode::kResumeAndKeep, std::max(0, 2 * (layer - 1)), 2 * layer + 2);
  tap_ = &cache;
  Status st = Run(chunks, observer);
  tap_ = nullptr;
  if (layer >= 2 && cache.unmatched() > 0) {  // the same statistics, only slower
    LOG_INFO("calibration: {} passes for layer {} ran from the first layer", cache.unmatched(), layer);
  }
  return st;
}

StatusOr<std::unique_ptr<CalibrationSession>> StartCalibration(LoadedModel* lm, const std::string& calib,
                                                               int calib_tokens, int calib_ctx, int threads,
                                                               const RuntimeOptions& rt) {
  Model& model = *lm->model;
  auto text = ReadTextArg(calib);
  if (!text.ok()) return text.status();
  const std::vector<int32_t> tokens = lm->tokenizer->Encode(*text, /*add_special=*/false, /*parse_special=*/false);
  const int32_t n_train = model.config.n_ctx_train;
  const int32_t n_ctx = calib_ctx > 0 ? calib_ctx : (n_train > 0 ? std::min(256, n_train) : 256);
  if (n_train > 0 && n_ctx > n_train) {
    return InvalidArgument(fmt::format("--calib-ctx {} is beyond the trained context {}", n_ctx, n_train));
  }
  if (tokens.size() < static_cast<size_t>(calib_tokens)) {
    return InvalidArgument(fmt::format("{} has {} tokens; --calib-tokens {} needs at least that many", calib,
                                       tokens.size(), calib_tokens));
  }
  auto s = std::make_unique<CalibrationSession>();
  s->chunks = CalibrationChunks(tokens, 0, static_cast<size_t>(calib_tokens), n_ctx, lm->tokenizer->vocab().bos);
  RETURN_IF_ERROR(prune::MakeLayerMatricesF32(&model));
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return kernels.status();
  s->kernels = *kernels;
  s->threads = ResolveThreads(threads);
  auto cal = Calibrator::Create(model, *lm->tokenizer, s->kernels, s->threads, n_ctx);
  if (!cal.ok()) return cal.status();
  s->calibrator = std::move(cal).value();
  return s;
}

}  // namespace infera::cli
