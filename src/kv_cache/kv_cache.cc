#include "kv_cache/kv_cache.h"

#include <fmt/format.h>

namespace infera {

KvSlotPool::KvSlotPool(int32_t n_slots) : n_slots_(n_slots) {
  free_.reserve(n_slots);
  for (int32_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);
}

Status KvSlotPool::Extend(std::vector<int32_t>* seq_slots, int32_t n) {
  if (n < 0) return InvalidArgument("negative slot count");
  if (n > num_free()) {
    return ResourceExhausted(fmt::format("KV cache full: need {} slots, {} free of {}", n, num_free(), n_slots_));
  }
  for (int32_t k = 0; k < n; ++k) {
    seq_slots->push_back(free_.back());
    free_.pop_back();
  }
  return Status::Ok();
}

void KvSlotPool::Truncate(std::vector<int32_t>* seq_slots, int32_t keep) {
  while (static_cast<int32_t>(seq_slots->size()) > keep) {
    free_.push_back(seq_slots->back());
    seq_slots->pop_back();
  }
}

}  // namespace infera
