// K and V rows for every layer and slot: f32, or int8 with one f32 scale per
// (slot, KV head) (`--kv-cache-type q8`: about a quarter of the f32 size).
// f32: K[layer], V[layer] are [n_slots, kv_dim]. q8: int8 [n_slots, kv_dim]
// plus scales [n_slots, n_kv_heads]; x ≈ scale * q.
// Owns its memory, committed by the OS only as slots are first written (rows
// are read only after they were written); not thread-safe for concurrent
// writes to the same slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace infera {

enum class KvType { kF32, kQ8 };

inline bool ParseKvType(const std::string& s, KvType* out) {
  if (s == "f32") *out = KvType::kF32;
  else if (s == "q8" || s == "q8_0" || s == "int8") *out = KvType::kQ8;
  else return false;
  return true;
}

class KvStorage {
 public:
  KvStorage(int n_layer, int32_t n_slots, int kv_dim, KvType type = KvType::kF32, int head_dim = 0)
      : n_slots_(n_slots), kv_dim_(kv_dim), type_(type), n_heads_(head_dim > 0 ? kv_dim / head_dim : 1) {
    const size_t n = static_cast<size_t>(n_layer) * n_slots * kv_dim;
    if (type == KvType::kF32) {
      k_.reset(new float[n]);
      v_.reset(new float[n]);
    } else {
      k8_.reset(new int8_t[n]);
      v8_.reset(new int8_t[n]);
      const size_t ns = static_cast<size_t>(n_layer) * n_slots * n_heads_;
      ks_.reset(new float[ns]);
      vs_.reset(new float[ns]);
    }
  }

  int32_t n_slots() const { return n_slots_; }
  int kv_dim() const { return kv_dim_; }
  KvType type() const { return type_; }
  int n_heads() const { return n_heads_; }
  float* k(int layer) { return k_.get() + Off(layer); }
  float* v(int layer) { return v_.get() + Off(layer); }
  int8_t* k8(int layer) { return k8_.get() + Off(layer); }
  int8_t* v8(int layer) { return v8_.get() + Off(layer); }
  float* k_scale(int layer) { return ks_.get() + static_cast<size_t>(layer) * n_slots_ * n_heads_; }
  float* v_scale(int layer) { return vs_.get() + static_cast<size_t>(layer) * n_slots_ * n_heads_; }

  static uint64_t BytesFor(int n_layer, int64_t n_slots, int kv_dim, KvType type = KvType::kF32, int head_dim = 0) {
    if (type == KvType::kF32) return 2ull * n_layer * n_slots * kv_dim * sizeof(float);
    const int heads = head_dim > 0 ? kv_dim / head_dim : 1;
    return 2ull * n_layer * n_slots * (kv_dim + heads * sizeof(float));
  }

 private:
  size_t Off(int layer) const { return static_cast<size_t>(layer) * n_slots_ * kv_dim_; }
  int32_t n_slots_;
  int kv_dim_;
  KvType type_;
  int n_heads_;
  std::unique_ptr<float[]> k_, v_, ks_, vs_;
  std::unique_ptr<int8_t[]> k8_, v8_;
};

}  // namespace infera
