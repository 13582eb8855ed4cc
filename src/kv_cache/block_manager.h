// Per-sequence block tables over one BlockPool (pure logic, no tensors).
// A sequence's positions map to KV slots: slot = block * block_size + offset.
// Full blocks of computed tokens are registered in the prefix cache; a new
// sequence starts from the longest cached run of full blocks that matches
// its tokens and computes only the rest. Only full blocks are ever shared,
// and a sequence appends into blocks it owns alone, so a shared block is
// never written (no copy-on-write is needed).
//
// Thread-safety: none; owned by the engine loop.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv_cache/block_pool.h"

namespace infera {

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching);

  int32_t block_size() const { return pool_.block_size(); }
  int32_t num_blocks() const { return pool_.n_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free(); }
  bool prefix_caching() const { return prefix_caching_; }
  const BlockPool& pool() const { return pool_; }

  int32_t BlocksFor(int32_t n_tokens) const { return (n_tokens + block_size() - 1) / block_size(); }

  // Starts sequence `id` (not yet known) with the longest cached prefix of
  // `tokens`, at most `max_cached` tokens; returns the number of tokens whose
  // K/V is already there (a multiple of the block size). `root` starts the
  // chain of block keys: sequences whose K/V differs for the same tokens
  // (LoRA adapters) use different roots and never share blocks; 0 for the
  // plain model (the chain ChainKeys and the offload tiers use).
  int32_t StartWithPrefix(uint64_t id, const std::vector<int32_t>& tokens, int32_t max_cached, uint64_t root = 0);
  // Makes room for positions [0, n_tokens) of `id` (created if unknown);
  // false, with nothing changed, if the pool has too few free blocks.
  bool Grow(uint64_t id, int32_t n_tokens);
  // Extra blocks Grow(id, n_tokens) would take.
  int32_t BlocksNeeded(uint64_t id, int32_t n_tokens) const;
  // Registers the full blocks among positions [0, n_computed) of `tokens`
  // (whose K/V is now written) in the prefix cache.
  void Commit(uint64_t id, const std::vector<int32_t>& tokens, int32_t n_computed);
  // Drops every block reference of `id` (cached ones stay reusable).
  void Free(uint64_t id);
  // Sliding-window attention: drops the references of `id`'s blocks whose
  // positions all lie before `pos` (never read again). Their slots stay in
  // the table (stale, never read: attention reads only positions in the
  // window); committed ones stay in the prefix cache.
  void ReleaseBefore(uint64_t id, int32_t pos);
  // Blocks `id` holds now (released ones excluded).
  int32_t HeldBlocks(uint64_t id) const;
  bool Has(uint64_t id) const { return seqs_.count(id) != 0; }

  // The KV slot of every position of `id` that has a block.
  const std::vector<int32_t>& Slots(uint64_t id) const;

  // Lower cache tiers (engine/kv_offloader.h). The chain keys of the first
  // n_blocks full blocks of `tokens`.
  static std::vector<uint64_t> ChainKeys(const std::vector<int32_t>& tokens, int32_t n_blocks, int32_t block_size);
  // How many leading blocks of the chain `keys` (of `tokens`) are cached.
  int32_t CachedBlocks(const std::vector<uint64_t>& keys, const std::vector<int32_t>& tokens) const;
  // The cached block of `key` holding `tokens` [block_size], with a
  // reference taken (released by Unpin); nullopt on a miss.
  std::optional<int32_t> PinCached(uint64_t key, const int32_t* tokens);
  // A new block registered under `key` as holding `tokens` (its K/V to be
  // written by the caller now), with one reference (released by Unpin);
  // nullopt when no block can be had.
  std::optional<int32_t> AdoptBlock(uint64_t key, const int32_t* tokens);
  void Unpin(int32_t b) { pool_.DecRef(b); }
  // Full blocks registered by Commit since the last call (when recording),
  // of the plain model's chain only (root 0: the offload tiers' blocks).
  struct Committed {
    uint64_t key;
    int32_t block;
  };
  void set_record_commits(bool on) { record_commits_ = on; }
  std::vector<Committed> TakeCommitted() { return std::move(committed_); }

  // Prefix cache counters, in tokens.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }

 private:
  struct Seq {
    std::vector<int32_t> blocks;  // -1: released (ReleaseBefore)
    std::vector<int32_t> slots;   // blocks expanded, block_size per block
    int32_t n_released = 0;       // blocks [0, n_released) are released
    int32_t n_committed = 0;      // full blocks registered (or taken from the cache)
    uint64_t last_key = 0;        // key of block n_committed - 1
    uint64_t root = 0;            // its chain's root (StartWithPrefix)
  };
  void AddBlock(Seq& s, int32_t b);

  BlockPool pool_;
  bool prefix_caching_;
  std::unordered_map<uint64_t, Seq> seqs_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  bool record_commits_ = false;
  std::vector<Committed> committed_;
};

}  // namespace infera
