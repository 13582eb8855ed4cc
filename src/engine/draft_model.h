// Speculative decoding's drafter with a second, smaller model that shares the
// target's vocabulary (`--draft-model`): for each sequence it keeps the draft
// model's own paged KV cache, catches up on the tokens the sequence gained
// since (prompt, accepted tokens), then drafts greedily, one batched draft
// forward pass per drafted position for all sequences together. With a
// context limit, the draft model sees a sequence from a start of its own:
// its position 0 is the sequence's token `start`.
//
// Thread-safety: none; owned by the engine loop. `model`, `kernels` and
// `pool` must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "attention/kv_storage.h"
#include "infera/status.h"
#include "kv_cache/block_manager.h"
#include "model/batch.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace infera {

class DraftModelProposer {
 public:
  // n_slots: KV positions of the draft cache (all sequences together).
  // context > 0: a sequence seen for the first time, or more than `context`
  // tokens ahead of what the draft model has seen, is started again on its
  // last `context` tokens (EngineOptions::spec_draft_context); 0: never.
  DraftModelProposer(const Model& model, const KernelTable& kernels, ThreadPool& pool, int32_t n_slots,
                     int32_t block_size, int32_t max_model_len, int32_t context = 0);

  struct Want {
    uint64_t id = 0;
    const std::vector<int32_t>* tokens = nullptr;  // the sequence (prompt + outputs)
    int32_t max_draft = 0;
    // > 0: a sequence more than this many tokens ahead of what the draft
    // model has seen starts again on its last max_catch_up tokens (as with
    // `context`, whichever is smaller); 0: catch up on all of them.
    int32_t max_catch_up = 0;
  };
  // Up to max_draft greedy tokens after each sequence's tokens, stopping a
  // sequence's draft where the draft model's top probability falls below
  // p_min. A failed draft forward pass drafts nothing (and is not an error
  // for the request: the target model still decodes).
  std::vector<std::vector<int32_t>> Propose(const std::vector<Want>& wants, float p_min);
  // After verification: only the first `valid` tokens of sequence `id` are
  // those the draft model saw (the rest of its draft was rejected).
  void Keep(uint64_t id, int32_t valid);
  // The sequence ended or its tokens changed (context shift).
  void Forget(uint64_t id);

 private:
  // Runs the batch; false (and forgets every sequence in it) on failure.
  bool Run(const std::vector<uint64_t>& ids);

  // What the draft model has of a sequence: tokens [start, computed) have
  // valid K/V, at draft positions 0 .. computed - start - 1.
  struct Seen {
    int32_t start = 0;
    int32_t computed = 0;
  };

  std::unique_ptr<ModelRunner> runner_;
  KvStorage kv_;
  BlockManager blocks_;
  int32_t max_model_len_;
  int32_t context_;
  int32_t n_vocab_;
  std::map<uint64_t, Seen> seen_;
  ForwardBatch batch_;
  std::vector<float> logits_;
};

}  // namespace infera
