// The disk tier: one file per block blob in a directory, least recently used
// files removed beyond a byte budget. Writes go to a temporary file renamed
// into place, so a crash leaves either the old state or the whole file (and
// the blob's checksum catches anything else). The index is rebuilt from the
// directory at start-up (oldest modification first), so blocks survive
// restarts. Touch with a TTL pins files (sessions) until then: eviction takes
// unpinned files first, pinned ones only when nothing else is left (the
// budget is a hard limit; pins last for this process's life). A full disk
// (ENOSPC) fails the Put; the store then stops writing for a while.
//
// Thread-safety: all methods (one mutex for the index; file I/O outside it).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kv_offload/tier.h"

namespace infera::kv_offload {

class DiskTier : public KvTier {
 public:
  // Creates `dir` if needed and indexes the blobs already there (stale
  // temporary files from a crash are removed).
  static StatusOr<std::unique_ptr<DiskTier>> Open(const std::string& dir, uint64_t max_bytes);

  const char* name() const override { return "disk"; }
  Status Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t ttl_seconds) override;
  StatusOr<std::vector<Blob>> Get(const std::vector<std::string>& keys) override;
  Status Touch(const std::vector<std::string>& keys, int64_t ttl_seconds) override;
  Status Delete(const std::vector<std::string>& keys) override;

  uint64_t bytes() const;
  size_t num_files() const;

 private:
  DiskTier(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(const std::string& key) const;
  // Drops least recently used files until the total fits. Requires mu_.
  void EvictLocked();
  // Drops `key` from the index (false if absent); RemoveLocked also
  // deletes its file. Require mu_.
  bool ForgetLocked(const std::string& key);
  void RemoveLocked(const std::string& key);

  struct Entry {
    uint64_t bytes = 0;
    std::list<std::string>::iterator lru;
    int64_t pinned_until = 0;  // Unix seconds: kept over unpinned files until then
  };
  const std::string dir_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> index_;
  std::list<std::string> lru_;  // front = least recently used
  uint64_t total_ = 0;
  uint64_t tmp_counter_ = 0;
};

}  // namespace infera::kv_offload
