// Calibration for `infera prune`: runs chunks of calibration text through
// the serving engine with an ActivationObserver on the decoder, and measures
// perplexity on a hold-out. The model's weights may be edited between runs
// (pruning layer by layer): every run reads them afresh.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "infera/engine.h"
#include "model/activation_observer.h"
#include "model/block_input_cache.h"
#include "prune/input_stats.h"
#include "tools/cli_common.h"

namespace infera::cli {

// Token chunks of at most n_ctx tokens, BOS first (bos >= 0), from tokens
// [from, to); a last piece shorter than two tokens is dropped.
std::vector<std::vector<int32_t>> CalibrationChunks(const std::vector<int32_t>& tokens, size_t from, size_t to,
                                                    int32_t n_ctx, int32_t bos);

// InputStats per (layer, input, expert) for the layers an observer wants.
class StatsCollector : public ActivationObserver {
 public:
  using Key = std::tuple<int, LinearInput, int>;
  // layers: the layers to collect (empty: all); inputs: which (empty: all).
  StatsCollector(std::vector<int> layers, std::vector<LinearInput> inputs, bool with_hessian);
  bool Wants(int layer) const override;
  void Observe(int layer, LinearInput which, int expert, const float* x, int64_t rows, int64_t width) override;
  // Null when nothing was seen for the key.
  const prune::InputStats* Find(int layer, LinearInput which, int expert) const;

 private:
  std::vector<int> layers_;
  std::vector<LinearInput> inputs_;
  bool with_hessian_;
  std::map<Key, std::unique_ptr<prune::InputStats>> stats_;
};

class Calibrator {
 public:
  // `model`, `tok` and `kernels` must outlive it. Chunks: token sequences
  // (BOS first) of at most n_ctx tokens.
  static StatusOr<std::unique_ptr<Calibrator>> Create(const Model& model, const Tokenizer& tok,
                                                      const KernelTable& kernels, int threads, int32_t n_ctx);
  // Runs every chunk with `observer` shown the activations.
  Status Run(const std::vector<std::vector<int32_t>>& chunks, ActivationObserver* observer);
  // Run for layer-by-layer algorithms, whose `observer` wants layer `layer`
  // only: the passes stop after that layer's FFN and start at layer
  // `layer - 1` from the residual stream the previous RunLayer of the same
  // `chunks` (the same object) kept, so each runs two layers, not all. Exact
  // while no weight before layer `layer - 1` has changed since that call: the
  // algorithms go through the layers in order and change only the layer
  // they observed. Passes that match no kept one run from the start (logged
  // at info level).
  Status RunLayer(const std::vector<std::vector<int32_t>>& chunks, int layer, ActivationObserver* observer);
  // llama-perplexity's measure over the chunks: the second half of each scored.
  StatusOr<double> Perplexity(const std::vector<std::vector<int32_t>>& chunks);
  // The log-softmax rows [positions, n_vocab] at the positions Perplexity
  // scores (the second half of each chunk, but the last), chunk after chunk.
  StatusOr<std::vector<float>> LogProbRows(const std::vector<std::vector<int32_t>>& chunks);
  // LogProbRows, keeping the residual stream at every block's input: 2
  // n_layer + 1 rows of n_embd floats per token of the chunks.
  StatusOr<std::vector<float>> LogProbRowsKeepingBlockInputs(const std::vector<std::vector<int32_t>>& chunks);
  // LogProbRows with every pass started at `block` (2 l: layer l's attention,
  // 2 l + 1: its FFN) from the streams kept by the last
  // LogProbRowsKeepingBlockInputs of the same chunks: the same rows as a whole
  // pass while no weight before that block has changed since.
  StatusOr<std::vector<float>> LogProbRowsFromBlock(const std::vector<std::vector<int32_t>>& chunks, int block);
  const BlockInputCache& block_inputs() const { return block_inputs_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  Calibrator() = default;
  // fn(logits row [n_vocab], its log-sum-exp, the next token) at every
  // position Perplexity scores.
  template <typename Fn>
  Status ForEachScoredRow(const std::vector<std::vector<int32_t>>& chunks, Fn&& fn);
  ActivationObserver* observer_ = nullptr;  // shown by the runner while Run runs
  ResidualTap* tap_ = nullptr;              // the runner's, while a run that resumes runs
  BlockInputCache block_inputs_;            // LogProbRows*: every block of whole passes
  // RunLayer: per chunk set (by address), the streams up to the last layer run.
  std::map<const std::vector<std::vector<int32_t>>*, BlockInputCache> layer_inputs_;
  std::unique_ptr<Engine> engine_;
  int32_t n_vocab_ = 0;
};

// A calibration session for the calibrated quantizers: the first
// `calib_tokens` tokens of a text in chunks, the model's layer matrices made
// editable f32 copies (prune::MakeLayerMatricesF32), and a calibrator over
// it. Owns the kernel table its engine uses; `lm` must outlive it.
struct CalibrationSession {
  std::vector<std::vector<int32_t>> chunks;
  KernelTable kernels;
  std::unique_ptr<Calibrator> calibrator;
  int threads = 1;
};
// calib_ctx 0: 256, or the trained context if shorter.
StatusOr<std::unique_ptr<CalibrationSession>> StartCalibration(LoadedModel* lm, const std::string& calib,
                                                               int calib_tokens, int calib_ctx, int threads,
                                                               const RuntimeOptions& rt);

}  // namespace infera::cli
