#include "kv_cache/block_pool.h"

#include <algorithm>
#include <functional>

#include "base/check.h"

namespace infera {

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size) : block_size_(block_size), blocks_(n_blocks) {
  CHECK(n_blocks >= 0 && block_size > 0);
  free_.reserve(n_blocks);
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // a min-heap: lowest id first
}

std::optional<int32_t> BlockPool::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    std::pop_heap(free_.begin(), free_.end(), std::greater<>());
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    Uncache(b);
  } else {
    return std::nullopt;
  }
  CHECK(blocks_[b].ref == 0);
  blocks_[b].ref = 1;
  return b;
}

void BlockPool::IncRef(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.ref == 0) {
    CHECK(blk.cached);  // a free block is taken with Allocate
    lru_.erase(blk.lru);
  }
  ++blk.ref;
}

void BlockPool::DecRef(int32_t b) {
  Block& blk = blocks_[b];
  CHECK(blk.ref > 0);
  if (--blk.ref > 0) return;
  if (blk.cached) {
    blk.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
    std::push_heap(free_.begin(), free_.end(), std::greater<>());
  }
}

std::optional<int32_t> BlockPool::Lookup(uint64_t key, const int32_t* tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  const int32_t b = it->second;
  if (!std::equal(tokens, tokens + block_size_, blocks_[b].tokens.begin())) return std::nullopt;
  IncRef(b);
  return b;
}

bool BlockPool::Contains(uint64_t key, const int32_t* tokens) const {
  auto it = by_key_.find(key);
  return it != by_key_.end() && std::equal(tokens, tokens + block_size_, blocks_[it->second].tokens.begin());
}

void BlockPool::Register(int32_t b, uint64_t key, const int32_t* tokens) {
  Block& blk = blocks_[b];
  CHECK(blk.ref > 0);
  if (blk.cached || by_key_.count(key)) return;
  blk.cached = true;
  blk.key = key;
  blk.tokens.assign(tokens, tokens + block_size_);
  by_key_[key] = b;
}

void BlockPool::Uncache(int32_t b) {
  Block& blk = blocks_[b];
  by_key_.erase(blk.key);
  blk.cached = false;
  blk.tokens.clear();
}

uint64_t BlockPool::ChainKey(uint64_t parent, const int32_t* tokens, int32_t n) {
  // FNV-1a over the parent key and the token ids, then a final mix.
  // (Not seeded with the parent as well: XORed in twice, its low byte
  // cancelled out, and parents differing only there gave the same key.)
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFF;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int32_t i = 0; i < n; ++i) mix(static_cast<uint32_t>(tokens[i]));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

bool BlockPool::AllFree() const {
  size_t cached_unref = 0;
  for (const Block& b : blocks_) {
    if (b.ref != 0) return false;
    if (b.cached) ++cached_unref;
  }
  return cached_unref == lru_.size() && free_.size() + lru_.size() == blocks_.size() &&
         by_key_.size() == cached_unref;
}

}  // namespace infera
