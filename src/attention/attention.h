// The attention of one decoder layer over a flat batch of tokens from many
// sequences: writing the batch's K/V rows into the cache (f32 or int8) and
// attending each query head over its sequence's cached rows, with an
// optional sliding window and score soft-capping.
//
// Thread-safety: a call writes only its own outputs and the cache slots of
// its tokens; one call per layer at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace infera {

// Where each token of a batch sits: its position in its sequence and that
// sequence's KV slot of every position (slots[pos] for pos <= positions[t]).
struct TokenSlots {
  const int32_t* positions;                                // [T]
  const int32_t* seq;                                      // [T] index into seq_slots
  const std::vector<const std::vector<int32_t>*>* seq_slots;
  int32_t slot(int32_t t) const { return (*(*seq_slots)[seq[t]])[positions[t]]; }
  const int32_t* slots_of(int32_t t) const { return (*seq_slots)[seq[t]]->data(); }
};

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0;           // multiplies q·k
  float softcap = 0;         // > 0: scores become softcap * tanh(score / softcap)
  int sliding_window = 0;    // > 0: a token at p sees positions (p - window, p]
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

// k, v [n_kv_heads * head_dim] of one token -> the cache rows of `slot` in
// `layer` (int8 caches quantize each head's row with its own scale).
void WriteKv(KvStorage& kv, int layer, int32_t slot, const float* k, const float* v, int n_head_kv, int head_dim);

// Buffers AttendBatch reuses from call to call (grown, never shrunk): one
// per pool thread, plus the per-chunk states of split long-context decode.
// Owned by one forward pass at a time.
struct AttentionWorkspace {
  std::vector<std::vector<float>> thread;
  std::vector<float> chunk_states;
  std::vector<int32_t> first;          // [T] each token's first visible position
  std::vector<int32_t> block_starts;   // [blocks + 1]
  std::vector<int64_t> item_first_piece;
};

// q [T, q_dim] -> out [T, q_dim] over the cached K/V of `layer`, which must
// already hold every position the batch attends to (including the batch's
// own tokens). Runs of consecutive positions of one sequence go through the
// tiled kernel (kernels/flash.h) in blocks of query tokens; when there are
// too few blocks to keep the pool busy (decode over a long context), their
// chunks of positions are spread over the threads and merged afterwards,
// with the same result.
void AttendBatch(const KernelTable& k, ThreadPool& pool, KvStorage& kv, int layer, const AttentionShape& s,
                 const TokenSlots& tokens, int32_t T, const float* q, float* out, AttentionWorkspace& ws);

}  // namespace infera
