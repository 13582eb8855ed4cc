// The decoder forward pass of every supported family, as named blocks that
// read like the model card:
//
//   x = Embed(tokens)                       (* embedding scale)
//   for each layer:
//     x += AttentionBlock(x)                pre-norm? · QKV · q/k-norm · RoPE
//                                           · KV write · attention · out · post-norm?
//     x += FfnBlock(x)                      pre-norm? · act(gate) * up · down · post-norm?
//   logits = Logits(x)                      final norm · output · scale · soft-cap
//
// What differs between families is data: ModelConfig (and its per-layer
// LayerConfig) decides norm placement, activation, q/k norms, windows,
// RoPE bases and scales; the tensor schema decides which weights exist.
// Runs one flat batch of tokens from many sequences; owns reusable scratch,
// so after the first call with a given batch size decode steps allocate
// nothing.
//
// Thread-safety: one Forward() at a time per runner; the Model may be shared
// by several runners.
#pragma once

#include <algorithm>
#include <vector>

#include "attention/attention.h"
#include "attention/rope.h"
#include "model/activation_observer.h"
#include "model/lora.h"
#include "model/model_runner.h"

namespace infera {

class DecoderRunner : public ModelRunner {
 public:
  // `model` and `pool` must outlive the runner (`kernels` is copied); n_ctx:
  // the longest sequence it will run (0: the trained context). A model whose
  // weights fit in cache (kCacheResidentWeightBytes) runs its ops below
  // kCacheResidentMinSplitBytes on the calling thread.
  static constexpr uint64_t kCacheResidentWeightBytes = uint64_t{32} << 20;
  static constexpr int64_t kCacheResidentMinSplitBytes = int64_t{512} << 10;
  // LoRA adapters come with each batch (ForwardBatch::lora_adapters; not
  // with a split model).
  DecoderRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool, int n_ctx = 0,
                ParallelComms comms = {});

  Status Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) override;
  const std::vector<float>& hidden() const override { return hidden_; }
  // Shows every linear layer's input to `observer` (not owned; null: none).
  void set_observer(ActivationObserver* observer) { observer_ = observer; }
  // Lets `tap` (not owned; null: none) see every block's input and start
  // passes part-way (see ResidualTap). Ignored by a model split over ranks.
  void set_residual_tap(ResidualTap* tap) { tap_ = tap; }
  // Ops smaller than this many bytes run on the calling thread (the
  // constructor's choice: kCacheResidentMinSplitBytes for a model in cache,
  // else 0). Tests set 0 to split every op. Between Forward() calls.
  void set_min_split_bytes(int64_t bytes) {
    kernels_.min_split_bytes = bytes;
    lora_kernels_.min_split_bytes = std::max(bytes, kLoraMinSplitBytes);
  }
  int64_t min_split_bytes() const { return kernels_.min_split_bytes; }

 private:
  Status Validate(const ForwardBatch& batch, const KvStorage& kv) const;
  void GrowScratch(const ForwardBatch& batch);
  // The blocks; each reads and updates the residual stream x_ [T, n_embd].
  void Embed(const ForwardBatch& batch);
  Status AttentionBlock(int layer, const ForwardBatch& batch, KvStorage& kv);
  Status FfnBlock(int layer, int32_t T);
  // The FFN of a MoE layer: in [T, n_embd] -> block_out_ [T, n_embd].
  void MoeFfn(int layer, const float* in, int32_t T);
  // act(gate) * up in place over rows of gate [rows, width].
  void GatedActivation(float* gate, const float* up, int32_t rows, int width);
  Status Logits(const ForwardBatch& batch, std::vector<float>* logits);
  // hidden_ [hidden_rows, n_embd]: the final norm of the wanted rows of x_.
  void HiddenRows(const ForwardBatch& batch);
  // A split model: the sum of the tensor-parallel ranks' partial block
  // outputs block_out_ [T, n_embd]; the pipeline stages' hand-offs.
  Status SumOverTpRanks(int32_t T);
  // q [qd], k and v [kvd] of one token += their biases (if the model has them).
  void AddQkvBias(const LayerWeights& L, float* q, float* k, float* v, int qd, int kvd) const;
  // Split olmo2-style Q/K norms: adds the biases and sums each token's
  // squares of Q and K over the ranks into qk_ss_ [T, 2].
  Status SumQkSquaresOverTpRanks(int layer, int32_t T);
  Status ReceiveFromPreviousStage(int32_t T);
  Status FinishStage(const ForwardBatch& batch, std::vector<float>* logits);
  // x_ += residual_scale * post_norm?(block_out_) for rows [t0, t1).
  void AddToResidual(const std::vector<float>& post_norm, int64_t t0, int64_t t1);
  // Runs fn(t0, t1) over T rows of `width` floats each: on the pool, or
  // inline when the op is too small to pay for splitting (one row, or a few
  // rows of a small model; KernelTable::ShouldSplit).
  void ForTokens(int32_t T, int64_t width, FunctionRef<void(int64_t, int64_t)> fn);
  // LoRA: each adapter's scale per token of the batch; then y [T, n_out] +=
  // scale(t) · alpha / r · B (A x[t]) for every adapter on layer `layer`'s
  // `target` (x [T, n_in]). Rows of tokens without an adapter are untouched,
  // so their results are those of a batch without LoRA.
  Status PrepareLora(const ForwardBatch& batch);
  void AddLora(int layer, LoraTarget target, const float* x, int32_t T, float* y);

  // Shows x [rows, width] to the observer if it wants layer l.
  void Observe(int l, LinearInput which, int expert, const float* x, int64_t rows, int64_t width) {
    if (observer_ != nullptr && observer_->Wants(l)) observer_->Observe(l, which, expert, x, rows, width);
  }

  ActivationObserver* observer_ = nullptr;
  ResidualTap* tap_ = nullptr;
  const Model& model_;
  const ModelConfig& c_;
  KernelTable kernels_;  // the table given, with min_split_bytes set for this model
  ThreadPool& pool_;
  const ShardSpec& shard_;
  ParallelComms comms_;
  std::vector<Rope> rope_;                  // per layer
  std::vector<AttentionShape> attn_shape_;  // per layer
  // Scratch, grown on demand, row-major [T, width]:
  std::vector<float> x_;          // residual stream [T, n_embd]
  std::vector<float> normed_;     // block input after its norm [T, n_embd]
  std::vector<float> q_, k_, v_;  // projections [T, q_dim] / [T, kv_dim]
  std::vector<float> attn_out_;   // attention output before wo [T, q_dim]
  std::vector<float> block_out_;  // a block's output [T, n_embd]
  std::vector<float> gate_, up_;  // [T, n_ff]
  // MoE scratch: router logits [T, n_expert]; each token's chosen experts
  // and weights [T, k]; per expert the (token, slot) rows it serves; the
  // gathered inputs [rows, n_embd] and outputs of one expert; every
  // (token, slot) output [T * k, n_embd].
  std::vector<float> router_logits_;
  std::vector<int32_t> route_experts_;
  std::vector<float> route_weights_;
  std::vector<std::vector<int32_t>> expert_rows_;
  std::vector<float> expert_in_, expert_out_, slot_out_;
  AttentionWorkspace attn_ws_;
  // Split models: every TP rank's attention output [tp, T, q_dim / tp] and
  // the whole rows [T, q_dim] (whole attention output matrix); this rank's
  // logits [R, vocab part] and every rank's [R * vocab].
  std::vector<float> attn_parts_, attn_whole_;
  std::vector<float> logits_part_, logits_parts_;
  std::vector<float> qk_ss_;
  std::vector<float> hidden_;  // [hidden_rows, n_embd] of the last Forward
  std::vector<const LoraAdapter*> lora_;  // the current batch's ForwardBatch::lora_adapters
  KernelTable lora_kernels_;  // kernels_ with LoRA's small GEMMs kept on the calling thread (kLoraMinSplitBytes)
  static constexpr int64_t kLoraMinSplitBytes = int64_t{256} << 10;
  std::vector<float> lora_scale_;             // [n_adapters, T]: the current batch's scales
  std::vector<uint8_t> lora_active_;          // [n_adapters]: some token of the batch uses it
  std::vector<float> lora_mid_, lora_delta_;  // A x [T, r]; B (A x) [T, n_out]
};

}  // namespace infera
