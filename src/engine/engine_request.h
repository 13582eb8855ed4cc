// The engine's per-request state (EngineRequest) and the rows a scheduled
// chunk owns in a step's outputs (ChunkRows): internal to engine.cc, apart
// so that the step loop reads on its own. Not thread-safe (the engine's
// loop thread owns them).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/spec_policy.h"
#include "engine/stop_checker.h"
#include "infera/engine.h"
#include "sampling/grammar_constraint.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace infera {

// The first prompt position whose logits row a request needs (prompt logits
// or prompt log-probabilities); -1: none.
inline int32_t FirstPromptRow(const RequestParams& p) { return p.prompt_logprobs >= 0 ? 0 : p.prompt_logits_from; }

// The first prompt position whose hidden state an embedding request needs
// (prompt_len - 1 for last-token pooling); -1: not an embedding request.
inline int32_t FirstHiddenRow(const RequestParams& p, int32_t prompt_len) {
  switch (p.pooling) {
    case Pooling::kNone: return -1;
    case Pooling::kMean:
    case Pooling::kCls: return 0;
    case Pooling::kLast: return prompt_len - 1;
  }
  return -1;
}

// One request's engine-side state: sampling, stop detection, text decoding.
struct EngineRequest {
  RequestParams params;
  Sampler sampler;
  StopChecker stops;
  std::unique_ptr<StreamDecoder> decoder;
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;  // resolved
  int32_t generated = 0;
  int32_t prompt_logits_next = 0;  // the next prompt position whose logits row is owed
  bool cancel = false;
  AcceptanceEstimate acceptance;  // of this request's drafts
  ProbeSchedule probes;           // drafts found but not worth verifying: when to try one anyway
  using Clock = std::chrono::steady_clock;
  Clock::time_point t_add = Clock::now(), t_sched, t_first;
  bool scheduled = false, has_first = false;
  // KV offload: while the prompt's prefix is looked up in the tiers the
  // request waits outside the scheduler (its prompt held here); then the
  // pool blocks it found are pinned until it is admitted (see Step).
  bool fetching = false;
  std::vector<int32_t> held_prompt;
  int32_t max_cached = INT32_MAX;
  std::vector<int32_t> pinned;
  // LoRA: each adapter's scale for this request (the batch's seq_lora points
  // here); empty when every adapter is off. cache_root keys its prefix-cache
  // blocks apart from other scale sets (0: none).
  std::vector<float> lora;
  uint64_t cache_root = 0;
  void Timing(RequestOutput* o) const {
    const auto now = Clock::now();
    auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    o->queue_seconds = scheduled ? secs(t_add, t_sched) : secs(t_add, now);
    o->ttft_seconds = has_first ? secs(t_sched, t_first) : 0.0;
    o->e2e_seconds = secs(t_add, now);
  }
  EngineRequest(const RequestParams& p, const Tokenizer* tok)
      : params(p), sampler(p.sampling), stops(p.stop) {
    // The text continues the prompt (keep the first piece's leading space)
    // unless it starts the output.
    if (tok != nullptr && p.detokenize) {
      decoder = std::make_unique<StreamDecoder>(*tok, p.text_starts_output, !p.skip_special_tokens);
    }
    prompt_rows_from = FirstPromptRow(p);
    prompt_logits_next = prompt_rows_from;
  }
  // Whether the logits row of prompt position `pos` is still owed.
  bool OwesPromptLogits(int32_t pos) const {
    return prompt_rows_from >= 0 && pos >= prompt_logits_next && pos < prompt_len;
  }
  int32_t prompt_rows_from = -1;  // the first prompt position whose row is wanted; -1: none

  // Embedding requests: whether the hidden state of prompt position `pos`
  // is still wanted (each position is taken once, even if a preempted
  // request computes it again), and the pooled sum of those taken.
  bool WantsHidden(int32_t pos) const {
    if (pos < hidden_next || pos >= prompt_len) return false;
    switch (params.pooling) {
      case Pooling::kNone: return false;
      case Pooling::kMean: return true;
      case Pooling::kCls: return pos == 0;
      case Pooling::kLast: return pos == prompt_len - 1;
    }
    return false;
  }
  void TakeHidden(int32_t pos, const float* h, int n_embd) {
    if (pooled.empty()) pooled.assign(n_embd, 0.0);
    for (int i = 0; i < n_embd; ++i) pooled[i] += h[i];
    ++pooled_rows;
    hidden_next = pos + 1;
  }
  // The embedding: the mean of the taken rows (one row for CLS / last),
  // L2-normalized if asked.
  std::vector<float> Embedding() const {
    std::vector<float> e(pooled.size());
    double norm = 0;
    for (size_t i = 0; i < pooled.size(); ++i) {
      const double v = pooled[i] / std::max(1, pooled_rows);
      e[i] = static_cast<float>(v);
      norm += v * v;
    }
    if (params.normalize_embedding && norm > 0) {
      const double inv = 1.0 / std::sqrt(norm);
      for (float& v : e) v = static_cast<float>(v * inv);
    }
    return e;
  }
  std::unique_ptr<GrammarConstraint> constraint;  // with params.grammar
  int32_t hidden_next = 0;
  std::vector<double> pooled;  // [n_embd]
  int32_t pooled_rows = 0;
};

// Where one scheduled chunk's rows are in the step's logits.
struct ChunkRows {
  int32_t first = 0;        // first row
  int32_t n_prompt = 0;     // rows of owed prompt positions (from row `first`)
  int32_t prompt_pos = 0;   // position of the first of them
  int32_t sample = -1;      // row to sample from; -1: none
  int32_t n_draft = 0;      // rows of drafted tokens to verify, after `sample`
  // Embedding requests: rows of batch.hidden_rows (from hidden_first), the
  // prompt position of the first, and whether the chunk ends the prompt.
  int32_t hidden_first = 0, n_hidden = 0, hidden_pos = 0;
  bool prompt_done = false;
};

}  // namespace infera
