// K and V rows for every layer and slot, f32.
// K[layer] and V[layer] are [n_slots, kv_dim] row-major.
// Owns its memory; not thread-safe for concurrent writes to the same slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace infera {

class KvStorage {
 public:
  // The memory is not written here: the OS commits pages as slots are first
  // used, so a large cache costs nothing until it fills. Rows are read only
  // after they were written.
  KvStorage(int n_layer, int32_t n_slots, int kv_dim)
      : n_slots_(n_slots), kv_dim_(kv_dim),
        k_(new float[static_cast<size_t>(n_layer) * n_slots * kv_dim]),
        v_(new float[static_cast<size_t>(n_layer) * n_slots * kv_dim]) {}

  int32_t n_slots() const { return n_slots_; }
  int kv_dim() const { return kv_dim_; }
  float* k(int layer) { return k_.get() + static_cast<size_t>(layer) * n_slots_ * kv_dim_; }
  float* v(int layer) { return v_.get() + static_cast<size_t>(layer) * n_slots_ * kv_dim_; }
  static uint64_t BytesFor(int n_layer, int64_t n_slots, int kv_dim) {
    return 2ull * n_layer * n_slots * kv_dim * sizeof(float);
  }

 private:
  int32_t n_slots_;
  int kv_dim_;
  std::unique_ptr<float[]> k_, v_;
};

}  // namespace infera
