// KV slot bookkeeping (pure logic, no tensors). A slot is one token's row in
// every layer's K and V storage. Each sequence owns an ordered list of slots,
// one per position (its block table, expanded to single tokens). Slots return
// to the pool as soon as a sequence is released.
//
// Thread-safety: none; owned by the engine loop.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/status.h"

namespace infera {

class KvSlotPool {
 public:
  explicit KvSlotPool(int32_t n_slots);

  int32_t capacity() const { return n_slots_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // Appends n slots to `seq_slots`; ResourceExhausted (and no change) if the
  // pool has fewer than n free.
  Status Extend(std::vector<int32_t>* seq_slots, int32_t n);
  // Returns the slots past position `keep` to the pool.
  void Truncate(std::vector<int32_t>* seq_slots, int32_t keep);
  void Release(std::vector<int32_t>* seq_slots) { Truncate(seq_slots, 0); }

 private:
  int32_t n_slots_;
  std::vector<int32_t> free_;  // stack; lowest slot ids on top
};

}  // namespace infera
