// A lower tier of the prefix cache: a key -> bytes store outside the
// process's RAM (disk_tier.h, redis_tier.h). Values are block blobs
// (block_blob.h); a tier need not know what they hold.
//
// Thread-safety: every implementation is safe to call from several threads
// (the offload store's writer and fetcher).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/status.h"

namespace infera::kv_offload {

// Bytes read from a tier, kept alive by `owner` (a string, a mapping of the
// file, a Redis reply): no copy between the tier and the KV cache. Empty
// bytes: a miss.
struct Blob {
  std::string_view bytes;
  std::shared_ptr<const void> owner;
  bool empty() const { return bytes.empty(); }
  // An owning copy of `s`.
  static Blob Of(std::string s) {
    auto own = std::make_shared<const std::string>(std::move(s));
    return Blob{std::string_view(*own), own};
  }
};

class KvTier {
 public:
  virtual ~KvTier() = default;
  // "disk" or "redis" (the metrics label).
  virtual const char* name() const = 0;
  // Stores every (key, value); ttl_seconds > 0 asks them to expire after
  // that long (a tier that cannot expire keys ignores it). An error means
  // the tier failed (some items may be stored).
  virtual Status Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t ttl_seconds) = 0;
  // The values of `keys`, empty for each missing one (a tier may stop at the
  // first miss and report the rest missing too: callers use the leading run
  // of hits); an error means the tier failed (no answer in time, connection
  // lost, garbage reply).
  virtual StatusOr<std::vector<Blob>> Get(const std::vector<std::string>& keys) = 0;
  // Extends the life of `keys` (Redis: EXPIRE; disk: most recently used).
  virtual Status Touch(const std::vector<std::string>& keys, int64_t ttl_seconds) = 0;
  virtual Status Delete(const std::vector<std::string>& keys) = 0;
};

}  // namespace infera::kv_offload
