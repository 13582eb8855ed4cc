// The engine's side of the KV offload tiers (kv_offload/offload_store.h):
// full blocks registered in the RAM prefix cache are encoded (K/V of every
// layer and KV head, f32 or int8 with a scale per row) and written through;
// a new request whose prompt's full blocks go past the RAM cache has the
// rest looked up in the tiers, and the blocks found are verified (model
// fingerprint, chain key, tokens, checksum) and loaded into free pool blocks
// before the request is scheduled, so the scheduler sees them as ordinary
// prefix-cache hits.
//
// Keys: the model fingerprint — a hash of the weights file(s), the
// architecture and every shape and RoPE setting K/V depends on, the KV and
// payload types and the block size — plus the block's chain key.
//
// Thread-safety: used by the engine loop only (the store has its own
// threads), except Counters and loaded_blocks: any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/kv_storage.h"
#include "engine/kv_block_codec.h"
#include "infera/engine.h"
#include "kernels/kernels.h"
#include "kv_cache/block_manager.h"
#include "kv_offload/offload_store.h"
#include "model/model.h"

namespace infera {

// The hash of a model's weight file, or of every file under a model folder
// (XXH3 over the bytes); 0 when `path` is neither (random models).
StatusOr<uint64_t> HashModelFiles(const std::string& path);

class KvOffloader {
 public:
  // `kernels`: its bf16 products (attention, matmuls) change the K/V values,
  // so they are part of the fingerprint and blocks computed with other
  // products never mix.
  static StatusOr<std::unique_ptr<KvOffloader>> Create(const Model& model, KvType kv_type, int32_t block_size,
                                                       int32_t max_model_len, const KvOffloadOptions& o,
                                                       const KernelTable& kernels);

  // Encodes and queues the blocks `blocks` registered since the last call
  // (end of a step: their K/V are written).
  void WriteThrough(BlockManager& blocks, KvStorage& kv);
  // Starts looking up the full blocks of `tokens` (at most max_cached tokens)
  // that the RAM cache lacks; false when there is nothing to look up.
  bool StartFetch(uint64_t id, const std::vector<int32_t>& tokens, int32_t max_cached, const BlockManager& blocks);
  // A request whose lookup finished, and the pool blocks it pins: the prefix
  // found in RAM and the blocks loaded from the tiers, one reference each,
  // to be released (BlockManager::Unpin) once the request is admitted.
  struct Ready {
    uint64_t id = 0;
    std::vector<int32_t> pinned;
  };
  // Loads finished lookups into the pool (waiting up to `wait` for one),
  // keeping `reserve` blocks free for running sequences.
  std::vector<Ready> Install(BlockManager& blocks, KvStorage& kv, std::chrono::milliseconds wait, int32_t reserve);
  // Forgets request `id`'s lookup (cancelled); its result is dropped.
  void Forget(uint64_t id) { pending_.erase(id); }
  bool fetching() const { return !pending_.empty(); }

  // Sessions. A turn of session `id` ended with `tokens` (prompt + output):
  // its blocks are pinned in the tiers for ttl_seconds (Redis expiry, disk
  // pins) and the session's record (its tokens) is stored beside them;
  // asynchronous.
  void PinSession(const std::string& id, const std::vector<int32_t>& tokens, int64_t ttl_seconds);
  // The tokens of session `id`: `known` if given, else its stored record
  // (NotFound if none); synchronous.
  StatusOr<std::vector<int32_t>> SessionTokens(const std::string& id);
  // Operator save: every block of `tokens` still in RAM written to the tiers
  // (again, even if written before), pinned, the record stored, and the
  // queue drained (up to `wait`). Returns (full blocks, blocks written).
  std::pair<int64_t, int64_t> SaveSession(const std::string& id, const std::vector<int32_t>& tokens, int64_t ttl_seconds,
                                          BlockManager& blocks, KvStorage& kv, std::chrono::milliseconds wait);
  // Removes the session's blocks and record from the tiers (blocks other
  // sessions share go too: they are recomputed when needed).
  Status DeleteSession(const std::string& id, const std::vector<int32_t>& tokens);
  // Waits for the write queue to drain.
  bool Flush(std::chrono::milliseconds wait) { return store_->Flush(wait); }

  uint64_t fingerprint() const { return fingerprint_; }
  // Any thread.
  uint64_t loaded_blocks() const { return loaded_blocks_.load(std::memory_order_relaxed); }
  kv_offload::OffloadCounters Counters() const;

 private:
  KvOffloader(std::unique_ptr<kv_offload::OffloadStore> store, uint64_t fingerprint, uint32_t kind, int32_t bs)
      : store_(std::move(store)), fingerprint_(fingerprint), kind_(kind), block_size_(bs) {}
  std::vector<std::string> KeysOf(const std::vector<uint64_t>& chain) const;
  // Encodes pool block `block` (holding `tokens`, under `chain_key`) and
  // queues it for the tiers under `key`.
  void EnqueueBlock(KvStorage& kv, int32_t block, uint64_t chain_key, const int32_t* tokens, std::string key);
  std::string SessionKey(const std::string& id) const;
  std::string SessionRecord(const std::string& id, const std::vector<int32_t>& tokens) const;
  std::vector<std::string> BlockKeysOf(const std::vector<int32_t>& tokens) const;

  struct Pending {
    std::vector<int32_t> tokens;   // the full blocks' tokens
    std::vector<uint64_t> chain;   // chain key of every full block
    int32_t first = 0;             // blocks [0, first) were in RAM at the lookup
  };
  std::unique_ptr<kv_offload::OffloadStore> store_;
  uint64_t fingerprint_;
  uint32_t kind_;
  int32_t block_size_;
  std::map<uint64_t, Pending> pending_;
  std::atomic<uint64_t> loaded_blocks_{0};
  uint64_t load_rejected_ = 0;
};

}  // namespace infera
