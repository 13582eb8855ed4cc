// Single-sequence generation with a KV cache: the prompt is processed as
// batches (once), then one token per step. Used by `infera run`, `bench`
// and the tests; the multi-request engine of Stage 4 builds on the same
// DecoderRunner and flat batches.
//
// Thread-safety: one call at a time per Generator.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "infera/request.h"
#include "infera/sampling_params.h"
#include "kv_cache/kv_cache.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace infera {

struct GenerateOptions {
  SamplingParams sampling;
  int32_t max_tokens = -1;  // -1: until a stop condition or the context is full
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> extra_eog;  // e.g. generation_config.json eos ids
  // Checked before every token; when it becomes true the generation ends
  // with FinishReason::kCancelled. May be null.
  const std::atomic<bool>* cancel = nullptr;
};

struct GenerateResult {
  FinishReason finish = FinishReason::kNone;
  std::vector<int32_t> tokens;  // generated ids
  int32_t prompt_tokens = 0;     // tokens processed for the prompt
  double prompt_seconds = 0;
  double gen_seconds = 0;
};

class Generator {
 public:
  // n_ctx: context size in tokens (KV slots). Model, kernels and pool must
  // outlive the generator; tokenizer may be null (token-id-only use).
  Generator(const Model& model, const Tokenizer* tokenizer, const KernelTable& kernels, ThreadPool& pool,
            int32_t n_ctx, int32_t n_batch = 512, KvType kv_type = KvType::kF32);

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_past() const { return static_cast<int32_t>(history_.size()); }
  const std::vector<int32_t>& history() const { return history_; }
  void Reset();
  // Drops positions >= n (their KV slots return to the pool).
  void Truncate(int32_t n);

  // Appends tokens to the sequence; fills logits of the last one.
  Status Feed(const std::vector<int32_t>& tokens, std::vector<float>* last_logits);
  // Logits of every fed token (for tests / perplexity): [n, n_vocab].
  Status FeedAllLogits(const std::vector<int32_t>& tokens, std::vector<float>* all_logits);
  // Logits of fed tokens [first, n) only: [n - first, n_vocab] (perplexity
  // scores the second half of a window; no output matmul for the rest).
  Status FeedLogitsFrom(const std::vector<int32_t>& tokens, int32_t first, std::vector<float>* logits);

  // Feeds `prompt` and samples until a stop condition. on_text receives
  // decoded, UTF-8-complete, stop-string-safe text as it is produced.
  // `echo_started`: whether text was already printed for this sequence
  // (controls the dummy-prefix space of the first generated piece).
  StatusOr<GenerateResult> Generate(const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                    const std::function<void(const std::string&)>& on_text,
                                    bool echo_started);

 private:
  // Logits for fed tokens with index >= first_logit (-1: only the last).
  Status FeedImpl(const std::vector<int32_t>& tokens, int32_t first_logit, std::vector<float>* logits);

  const Model& model_;
  const Tokenizer* tok_;
  DecoderRunner runner_;
  int32_t n_ctx_, n_batch_;
  KvStorage kv_;
  KvSlotPool slot_pool_;
  std::vector<int32_t> slots_;    // KV slot of each position
  std::vector<int32_t> history_;  // tokens at each position
  ForwardBatch batch_;
  std::vector<float> logits_;
};

}  // namespace infera
