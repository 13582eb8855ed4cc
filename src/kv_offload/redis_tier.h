// The Redis tier: block blobs as Redis strings, written with pipelined
// `SET key value EX ttl`, read with one `MGET`, through a small pool of
// hiredis connections. Every connect and command has the timeout given; a
// failed connection is dropped with every idle one, and the call is tried
// once more on a new connection, so a Redis that restarted is used again at
// once.
//
// Thread-safety: all methods (connections are taken from the pool under a
// mutex and used by one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kv_offload/tier.h"

struct redisContext;

namespace infera::kv_offload {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
};
// redis://[:password@]host[:port][/db]
StatusOr<RedisUrl> ParseRedisUrl(const std::string& url);

class RedisTier : public KvTier {
 public:
  // Does not connect (the first call does): a Redis that is down at start-up
  // only makes the first requests miss.
  RedisTier(RedisUrl url, int timeout_ms, int max_connections = 4);
  ~RedisTier() override;

  const char* name() const override { return "redis"; }
  Status Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t ttl_seconds) override;
  StatusOr<std::vector<Blob>> Get(const std::vector<std::string>& keys) override;
  Status Touch(const std::vector<std::string>& keys, int64_t ttl_seconds) override;
  Status Delete(const std::vector<std::string>& keys) override;

 private:
  // A connected context (pooled, unless fresh), or Unavailable.
  StatusOr<redisContext*> Acquire(bool fresh = false);
  // Frees every idle connection (after one failed: the server restarted or
  // went away, so the others are stale too).
  void DropIdle();
  StatusOr<std::vector<Blob>> GetOnce(const std::vector<std::string>& keys, bool fresh);
  Status PipelineOnce(const std::vector<std::vector<std::string>>& cmds, bool want_ok, bool fresh);
  // Back to the pool (healthy) or freed.
  void Release(redisContext* c, bool healthy);
  // Sends the commands pipelined and reads every reply; `check` sees each.
  Status Pipeline(const std::vector<std::vector<std::string>>& cmds, bool want_ok);

  const RedisUrl url_;
  const int timeout_ms_;
  const int max_connections_;
  std::mutex mu_;
  std::vector<redisContext*> idle_;
};

}  // namespace infera::kv_offload
