// The Llama-family forward pass (llama, mistral, qwen2) over one flat batch
// of tokens from many sequences. Owns reusable scratch buffers: after the
// first call with a given batch size, decode steps allocate nothing.
//
// Thread-safety: one Forward() at a time per LlamaRunner; the Model may be
// shared by several runners.
#pragma once

#include <vector>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "infera/status.h"
#include "kernels/kernels.h"
#include "model/batch.h"
#include "model/model.h"

namespace infera {

class LlamaRunner {
 public:
  // `model`, `kernels` and `pool` must outlive the runner.
  LlamaRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool);

  // Runs the batch, writing K/V of every token into `kv`, and the logits of
  // batch.logit_rows into logits [logit_rows.size(), n_vocab].
  Status Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits);

  // Use the naive reference attention (one score row per head) instead of the
  // tiled kernel: for tests.
  void set_naive_attention(bool on) { naive_attention_ = on; }

 private:
  Status Validate(const ForwardBatch& batch, const KvStorage& kv) const;
  void Rope(float* x, int n_heads, int pos) const;
  void EmbedTokens(const ForwardBatch& batch);

  const Model& model_;
  const ModelConfig& c_;
  const KernelTable& k_;
  ThreadPool& pool_;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
  // Scratch, grown on demand: [T, width] row-major.
  std::vector<float> x_, xn_, q_, kk_, vv_, att_, tmp_, gate_, up_;
  std::vector<std::vector<float>> scores_;  // per thread [max_pos + 1]
  bool naive_attention_ = false;
};

}  // namespace infera
