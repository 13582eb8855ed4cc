// K and V rows for every layer and slot: f32, or int8 with one f32 scale per
// (slot, KV head) (`--kv-cache-type q8`: about a quarter of the f32 size), or
// bf16 (`--kv-cache-type bf16`: half, in the pair layouts of the bf16
// attention kernel, FlashK16Index / FlashV16Index).
// Head-major, so attention streams one KV head's cache contiguously; per
// layer and KV head, slots padded to a multiple of kFlashTile: V rows
// [n_slots, head_dim], K the same values in the tiled kernel's layout
// (FlashKIndex: groups of 16 slots transposed); q8: int8 values plus one
// scale per slot [n_slots]; x ≈ scale * q.
// Owns its memory (base/lazy_buffer.h: huge pages where allowed), committed
// by the OS only as slots are first written (rows are read only after they
// were written); not thread-safe for concurrent
// writes to the same slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/lazy_buffer.h"
#include "kernels/kernels.h"

namespace infera {

enum class KvType { kF32, kQ8, kBF16 };

inline bool ParseKvType(const std::string& s, KvType* out) {
  if (s == "f32") *out = KvType::kF32;
  else if (s == "q8" || s == "q8_0" || s == "int8") *out = KvType::kQ8;
  else if (s == "bf16") *out = KvType::kBF16;
  else return false;
  return true;
}
inline const char* KvTypeName(KvType t) { return t == KvType::kF32 ? "f32" : t == KvType::kQ8 ? "q8" : "bf16"; }

class KvStorage {
 public:
  // kv_heads [n_layer]: each layer's KV heads (layers may differ: pruned
  // models), head_dim wide. Layer l's rows are kv_heads[l] * head_dim wide.
  KvStorage(std::vector<int> kv_heads, int32_t n_slots, int head_dim, KvType type = KvType::kF32)
      : n_slots_(n_slots),
        padded_slots_((int64_t(n_slots) + kFlashTile - 1) / kFlashTile * kFlashTile),
        head_dim_(head_dim),
        type_(type),
        heads_(std::move(kv_heads)) {
    size_t n = 0, ns = 0;
    for (int h : heads_) {
      off_.push_back(n);
      scale_off_.push_back(ns);
      off16_.push_back(n16_);
      n += static_cast<size_t>(padded_slots_) * h * head_dim;
      ns += static_cast<size_t>(padded_slots_) * h;
      n16_ += static_cast<size_t>(padded_slots_) * h * FlashHead16Elems(head_dim);
    }
    if (type == KvType::kF32) {
      k_ = AllocateLazyBuffer(n * sizeof(float));
      v_ = AllocateLazyBuffer(n * sizeof(float));
    } else if (type == KvType::kBF16) {
      k16_ = AllocateLazyBuffer(n16_ * sizeof(uint16_t));
      v16_ = AllocateLazyBuffer(n16_ * sizeof(uint16_t));
    } else {
      k8_ = AllocateLazyBuffer(n);
      v8_ = AllocateLazyBuffer(n);
      ks_ = AllocateLazyBuffer(ns * sizeof(float));
      vs_ = AllocateLazyBuffer(ns * sizeof(float));
    }
  }

  int n_layer() const { return static_cast<int>(heads_.size()); }
  int32_t n_slots() const { return n_slots_; }
  int kv_dim(int layer) const { return heads_[layer] * head_dim_; }
  int n_heads(int layer) const { return heads_[layer]; }
  KvType type() const { return type_; }
  // KV head h of `layer`: V f32 or int8 rows [n_slots, head_dim] (slot s at
  // + s * head_dim), K the same in FlashKIndex's layout; scales [n_slots].
  float* k(int layer, int h) { return F32(k_) + off_[layer] + HeadOffset(h); }
  float* v(int layer, int h) { return F32(v_) + off_[layer] + HeadOffset(h); }
  int8_t* k8(int layer, int h) { return I8(k8_) + off_[layer] + HeadOffset(h); }
  int8_t* v8(int layer, int h) { return I8(v8_) + off_[layer] + HeadOffset(h); }
  // bf16: K in FlashK16Index's layout, V in FlashV16Index's (bf16 bits).
  uint16_t* k16(int layer, int h) { return U16(k16_) + off16_[layer] + size_t(h) * padded_slots_ * FlashHead16Elems(head_dim_); }
  uint16_t* v16(int layer, int h) { return U16(v16_) + off16_[layer] + size_t(h) * padded_slots_ * FlashHead16Elems(head_dim_); }
  float* k_scale(int layer, int h) { return F32(ks_) + scale_off_[layer] + size_t(h) * padded_slots_; }
  float* v_scale(int layer, int h) { return F32(vs_) + scale_off_[layer] + size_t(h) * padded_slots_; }

  // Bytes for n_slots slots of every layer.
  static uint64_t BytesFor(const std::vector<int>& kv_heads, int64_t n_slots, int head_dim,
                           KvType type = KvType::kF32) {
    uint64_t per_slot = 0;
    for (int h : kv_heads) {
      per_slot += type == KvType::kF32    ? 2ull * h * head_dim * sizeof(float)
                  : type == KvType::kBF16 ? 2ull * h * FlashHead16Elems(head_dim) * sizeof(uint16_t)
                                          : 2ull * h * (head_dim + sizeof(float));
    }
    return per_slot * static_cast<uint64_t>(n_slots);
  }
  uint64_t bytes() const { return BytesFor(heads_, n_slots_, head_dim_, type_); }

 private:
  size_t HeadOffset(int h) const { return size_t(h) * padded_slots_ * head_dim_; }
  static float* F32(const LazyBuffer& b) { return static_cast<float*>(b.get()); }
  static int8_t* I8(const LazyBuffer& b) { return static_cast<int8_t*>(b.get()); }
  static uint16_t* U16(const LazyBuffer& b) { return static_cast<uint16_t*>(b.get()); }

  int32_t n_slots_;
  int64_t padded_slots_;
  int head_dim_;
  KvType type_;
  std::vector<int> heads_;
  std::vector<size_t> off_, scale_off_, off16_;  // per layer, in elements
  size_t n16_ = 0;
  LazyBuffer k_, v_, ks_, vs_, k8_, v8_, k16_, v16_;  // anonymous mmaps (transparent huge pages)
};

}  // namespace infera
