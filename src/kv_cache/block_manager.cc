#include "kv_cache/block_manager.h"

#include <algorithm>

#include "base/check.h"

namespace infera {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching)
    : pool_(n_blocks, block_size), prefix_caching_(prefix_caching) {}

void BlockManager::AddBlock(Seq& s, int32_t b) {
  s.blocks.push_back(b);
  for (int32_t i = 0; i < block_size(); ++i) s.slots.push_back(b * block_size() + i);
}

int32_t BlockManager::StartWithPrefix(uint64_t id, const std::vector<int32_t>& tokens, int32_t max_cached,
                                      uint64_t root) {
  CHECK(!Has(id));
  Seq& s = seqs_[id];
  s.last_key = root;
  s.root = root;
  const int32_t bs = block_size();
  prefix_queries_ += tokens.size();
  if (!prefix_caching_) return 0;
  const int32_t max_blocks = std::max(0, max_cached) / bs;
  for (int32_t blk = 0; blk < max_blocks; ++blk) {
    const int32_t* t = tokens.data() + blk * bs;
    const uint64_t key = BlockPool::ChainKey(s.last_key, t, bs);
    auto b = pool_.Lookup(key, t);
    if (!b) break;
    AddBlock(s, *b);
    s.n_committed = blk + 1;
    s.last_key = key;
  }
  const int32_t hit = s.n_committed * bs;
  prefix_hits_ += hit;
  return hit;
}

int32_t BlockManager::BlocksNeeded(uint64_t id, int32_t n_tokens) const {
  auto it = seqs_.find(id);
  const int32_t have = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
  return std::max(0, BlocksFor(n_tokens) - have);
}

bool BlockManager::Grow(uint64_t id, int32_t n_tokens) {
  const int32_t need = BlocksNeeded(id, n_tokens);
  if (need > pool_.num_free()) return false;
  Seq& s = seqs_[id];
  for (int32_t i = 0; i < need; ++i) AddBlock(s, *pool_.Allocate());
  return true;
}

void BlockManager::Commit(uint64_t id, const std::vector<int32_t>& tokens, int32_t n_computed) {
  if (!prefix_caching_) return;
  Seq& s = seqs_.at(id);
  const int32_t bs = block_size();
  const int32_t full = std::min<int32_t>(n_computed / bs, static_cast<int32_t>(s.blocks.size()));
  for (int32_t blk = s.n_committed; blk < full; ++blk) {
    const int32_t* t = tokens.data() + blk * bs;
    const uint64_t key = BlockPool::ChainKey(s.last_key, t, bs);
    if (record_commits_ && s.root == 0 && !pool_.Contains(key, t)) committed_.push_back({key, s.blocks[blk]});
    pool_.Register(s.blocks[blk], key, t);
    s.last_key = key;
    s.n_committed = blk + 1;
  }
}

void BlockManager::Free(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Last blocks first, so that a prefix's head stays cached longest.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) {
    if (*b >= 0) pool_.DecRef(*b);
  }
  seqs_.erase(it);
}

void BlockManager::ReleaseBefore(uint64_t id, int32_t pos) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  const int32_t n = std::min<int32_t>(std::max(0, pos) / block_size(), static_cast<int32_t>(s.blocks.size()));
  for (; s.n_released < n; ++s.n_released) {
    int32_t& b = s.blocks[s.n_released];
    if (prefix_caching_ && s.n_released >= s.n_committed) break;  // (full blocks before pos are committed)
    pool_.DecRef(b);
    b = -1;
  }
}

int32_t BlockManager::HeldBlocks(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size()) - it->second.n_released;
}

std::vector<uint64_t> BlockManager::ChainKeys(const std::vector<int32_t>& tokens, int32_t n_blocks,
                                              int32_t block_size) {
  CHECK(static_cast<int64_t>(n_blocks) * block_size <= static_cast<int64_t>(tokens.size()));
  std::vector<uint64_t> keys;
  keys.reserve(n_blocks);
  uint64_t last = 0;
  for (int32_t blk = 0; blk < n_blocks; ++blk) {
    last = BlockPool::ChainKey(last, tokens.data() + static_cast<size_t>(blk) * block_size, block_size);
    keys.push_back(last);
  }
  return keys;
}

int32_t BlockManager::CachedBlocks(const std::vector<uint64_t>& keys, const std::vector<int32_t>& tokens) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(keys.size()) &&
         pool_.Contains(keys[n], tokens.data() + static_cast<size_t>(n) * block_size())) {
    ++n;
  }
  return n;
}

std::optional<int32_t> BlockManager::PinCached(uint64_t key, const int32_t* tokens) {
  return pool_.Lookup(key, tokens);
}

std::optional<int32_t> BlockManager::AdoptBlock(uint64_t key, const int32_t* tokens) {
  if (pool_.Contains(key, tokens)) return std::nullopt;
  auto b = pool_.Allocate();
  if (!b) return std::nullopt;
  pool_.Register(*b, key, tokens);
  return b;
}

const std::vector<int32_t>& BlockManager::Slots(uint64_t id) const { return seqs_.at(id).slots; }

}  // namespace infera
