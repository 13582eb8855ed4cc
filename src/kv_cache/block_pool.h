// The pool of KV blocks (pure logic, no tensors): fixed-size blocks of
// `block_size` token slots, reference-counted, plus the prefix cache. A full
// block can be registered under a content key (a hash of its parent block's
// key and its own tokens, tokens kept to rule out collisions); a registered
// block whose last reference goes stays cached and reusable until the pool
// needs a block, then the least recently used one is evicted.
//
// Thread-safety: none; owned by the engine loop.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace infera {

class BlockPool {
 public:
  BlockPool(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks an Allocate can return now: free ones plus evictable cached ones.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  // Blocks with at least one reference.
  int32_t num_used() const { return n_blocks() - num_free(); }
  int32_t num_cached() const { return static_cast<int32_t>(by_key_.size()); }

  // A block with reference count 1 (evicting the least recently used cached
  // block if no block is free), or nullopt when every block is referenced.
  std::optional<int32_t> Allocate();
  void IncRef(int32_t b);
  // Drops one reference; at zero the block becomes free, or evictable if it
  // is registered in the prefix cache.
  void DecRef(int32_t b);
  int32_t RefCount(int32_t b) const { return blocks_[b].ref; }

  // The cached block holding exactly `tokens` [block_size] under `key`, with
  // a reference taken; nullopt on a miss.
  std::optional<int32_t> Lookup(uint64_t key, const int32_t* tokens);
  // Registers full block b (referenced) under key; a no-op if the key is
  // already cached (the other block stays the canonical one).
  void Register(int32_t b, uint64_t key, const int32_t* tokens);
  // Whether `key` is cached with exactly `tokens` (no reference taken).
  bool Contains(uint64_t key, const int32_t* tokens) const;
  // The tokens of registered block b.
  const std::vector<int32_t>& TokensOf(int32_t b) const { return blocks_[b].tokens; }

  // The key of a full block whose predecessor has key `parent` (0 for the
  // first block).
  static uint64_t ChainKey(uint64_t parent, const int32_t* tokens, int32_t n);

  // Every block free, or cached with no references, and the books balance.
  bool AllFree() const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;
    uint64_t key = 0;
    std::vector<int32_t> tokens;       // when cached
    std::list<int32_t>::iterator lru;  // when cached and unreferenced
  };
  void Uncache(int32_t b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  // Unreferenced, uncached; a min-heap, so a sequence's blocks come in
  // ascending order (attention streams them forward, as hardware
  // prefetchers expect) even after others were freed.
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;     // unreferenced, cached; front = least recent
  std::unordered_map<uint64_t, int32_t> by_key_;
};

}  // namespace infera
