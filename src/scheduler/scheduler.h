// Continuous (iteration-level) batching (pure logic, no tensors). Each step
// builds one ragged batch under a token budget and a sequence cap: running
// sequences first (a decode token each, or the next chunk of a long prompt),
// in priority order, then waiting ones in (priority, arrival) order. When KV
// blocks run out, the lowest-priority, latest-arrived running sequence is
// preempted: its blocks are freed and it waits again, to be recomputed from
// its prompt plus the tokens it already produced (which it keeps). With
// guaranteed admission a sequence is admitted only when blocks for its whole
// prompt plus max_tokens are free, and nothing is ever preempted.
//
// Only the plain-data SchedulerOutput goes to the executor.
//
// Thread-safety: none; owned by the engine loop.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "infera/status.h"
#include "kv_cache/block_manager.h"

namespace infera {

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_batched_tokens = 512;
  int32_t max_model_len = 2048;  // context per sequence
  bool guaranteed_admission = false;
  // Long generations: a sequence may outgrow the context; Shift() then drops
  // the older half of its tokens after the first `keep`.
  bool context_shift = false;
  // > 0: every layer attends at most this many positions back (sliding
  // window); blocks wholly before the window of a sequence's next token are
  // released as it advances, so its KV memory stays bounded by the window.
  int32_t sliding_window = 0;
};

// One sequence's work in a step: tokens [start, start + n) of its token list
// (prompt then outputs); logits of the last one are wanted when it is the
// sequence's newest token. Speculative decoding: `draft` tokens follow at
// positions start + n, ... (guesses, not yet part of the sequence); the logits
// of every one of them are wanted too, to verify them.
struct ScheduledChunk {
  uint64_t id = 0;
  int32_t start = 0;
  int32_t n = 0;
  bool want_logits = false;
  std::vector<int32_t> draft;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> preempted;  // this step
  int32_t num_tokens = 0;  // including drafted tokens
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockManager* blocks);

  // Queues a sequence. InvalidArgument if it could never run: prompt +
  // max_tokens beyond the context, or more blocks than the pool has.
  // max_tokens 0: the prompt only. At most `max_cached` prompt tokens are
  // taken from the prefix cache (the rest are computed, e.g. for their logits).
  // `cache_root`: the prefix cache's key chain root (BlockManager::StartWithPrefix).
  Status Add(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority,
             int32_t max_cached = INT32_MAX, uint64_t cache_root = 0);
  // Add's checks of a request's size, without adding it. Reads only the
  // configuration (safe from any thread while the scheduler runs).
  Status Check(size_t prompt_len, int32_t max_tokens) const;
  SchedulerOutput Schedule();
  // After the executor ran `out`: marks the chunks computed (registering full
  // blocks in the prefix cache).
  void Computed(const SchedulerOutput& out);
  // Appends a sampled token to a running sequence. kv_computed: its K/V is
  // already in the cache (a verified draft token, computed at the position it
  // now takes); the sequence must then have every earlier token computed.
  void Append(uint64_t id, int32_t token, bool kv_computed = false);
  // Draft tokens to verify after sequence `id`'s newest token at the next
  // Schedule() (which consumes them). Used only when that token is the one
  // left to compute; cut to the token budget, the context and the pool.
  void SetDraft(uint64_t id, std::vector<int32_t> draft);
  // Whether `id` runs and waits only for its newest token (a decode step).
  bool IsDecoding(uint64_t id) const;
  // Ends a sequence (finished, cancelled or failed): its blocks go back now.
  void Finish(uint64_t id);
  // Context shift (llama.cpp's): keeps tokens [0, keep) and the newer half of
  // the rest, frees the blocks and lets the sequence recompute that context
  // (its first `keep` positions stay those of the sink tokens).
  void Shift(uint64_t id, int32_t keep);

  bool Has(uint64_t id) const { return seqs_.count(id) != 0; }
  const std::vector<int32_t>& Tokens(uint64_t id) const { return seqs_.at(id).tokens; }
  int32_t PromptLen(uint64_t id) const { return seqs_.at(id).prompt_len; }
  int32_t CachedTokens(uint64_t id) const { return seqs_.at(id).cached; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  // Waiting sequences that ran before and were preempted.
  int32_t num_preempted_waiting() const;
  uint64_t prefill_tokens_computed() const { return prefill_computed_; }
  // Sum over running sequences of the tokens whose K/V is in the cache.
  uint64_t TokensHeld() const;

 private:
  struct Seq {
    uint64_t id = 0;
    int32_t priority = 0;
    uint64_t arrival = 0;
    std::vector<int32_t> tokens;  // prompt, then outputs
    int32_t prompt_len = 0;
    int32_t max_tokens = 0;
    int32_t max_cached = 0;
    uint64_t cache_root = 0;
    int32_t computed = 0;  // tokens whose K/V is in the cache
    int32_t cached = 0;    // of those, taken from the prefix cache at (first) admission
    bool admitted_once = false;
    std::vector<int32_t> draft;  // for the next Schedule() only
  };
  // Orders by (priority, arrival): lower first.
  bool Before(const Seq& a, const Seq& b) const {
    return a.priority != b.priority ? a.priority < b.priority : a.arrival < b.arrival;
  }
  void SortByPriority(std::vector<uint64_t>* ids) const;
  void Preempt(uint64_t id);
  void ReleaseOutsideWindow(const Seq& s);

  SchedulerConfig cfg_;
  BlockManager* blocks_;
  std::map<uint64_t, Seq> seqs_;
  std::vector<uint64_t> running_, waiting_;
  std::vector<uint64_t> drafted_;  // sequences given a draft for the next Schedule()
  uint64_t next_arrival_ = 0;
  uint64_t num_preemptions_ = 0;
  uint64_t prefill_computed_ = 0;
};

}  // namespace infera
