// The lower tiers of the prefix cache behind one interface for the engine:
// write-through of computed blocks on a writer thread (bounded queue; a full
// queue drops the block and counts it), lookups of a chain of block keys on
// a fetcher thread (disk first, then Redis for what disk lacks), and the
// fault policy: a tier that fails (error, timeout, full) is skipped for a
// back-off period (1 s doubling to 10 s; a full disk: 60 s), with one
// warning per tier per 10 s — requests then recompute, never fail.
//
// Thread-safety: every public method may be called from any thread; the
// engine loop calls Enqueue / Fetch / TakeFetched, /metrics calls Stats.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "infera/status.h"
#include "kv_offload/tier.h"

namespace infera::kv_offload {

struct OffloadConfig {
  std::string dir;                 // "" : no disk tier
  uint64_t dir_max_bytes = 0;
  std::string redis_url;           // "" : no Redis tier
  int64_t ttl_seconds = 0;         // Redis expiry (0: none)
  int timeout_ms = 500;            // per Redis connect / read / write
  uint64_t max_queue_bytes = 256ull << 20;  // write-through queue
};

// Counters of one tier (blocks, bytes, seconds), cumulative.
struct TierCounters {
  std::string tier;
  uint64_t hits = 0, misses = 0;   // blocks looked up
  uint64_t errors = 0;             // failed calls (timeouts, connection, full)
  uint64_t corrupt = 0;            // blobs that failed verification
  uint64_t read_bytes = 0, written_bytes = 0, writes = 0;
  uint64_t skipped = 0;            // calls skipped while the tier backed off
  double get_seconds = 0;
  uint64_t gets = 0;
  bool healthy = true;
};

struct OffloadCounters {
  std::vector<TierCounters> tiers;
  uint64_t dropped_writes = 0;     // queue full
  uint64_t queued_bytes = 0;       // now
};

// One finished lookup: values[i] is the blob of keys[i] from tier
// tier_of[i], for the leading run of keys some tier had.
struct FetchResult {
  uint64_t ticket = 0;
  std::vector<Blob> values;
  std::vector<int> tier_of;
};

class OffloadStore {
 public:
  // Opens the tiers; a bad directory or URL is an error, a Redis that is
  // down is not (its first calls fail, and it is retried after back-off).
  static StatusOr<std::unique_ptr<OffloadStore>> Create(const OffloadConfig& cfg);
  // Tiers given directly (tests).
  OffloadStore(std::vector<std::unique_ptr<KvTier>> tiers, const OffloadConfig& cfg);
  // Drains the write queue first (up to 10 s).
  ~OffloadStore();

  // Queues `blob` for every tier under `key`; false if the queue is full
  // (the block is dropped).
  bool Enqueue(std::string key, std::string blob);
  // Starts looking `keys` up (in order; the result is the leading run found).
  void Fetch(uint64_t ticket, std::vector<std::string> keys);
  // Finished lookups; waits up to `wait` for one if none is ready.
  std::vector<FetchResult> TakeFetched(std::chrono::milliseconds wait);
  size_t fetches_in_flight() const;
  // A blob from tier `tier` failed verification: counted, and deleted there.
  void ReportCorrupt(int tier, const std::string& key);
  // Whether `key` was written or read recently (no need to write it again).
  bool Known(const std::string& key) const;
  void MarkKnown(const std::string& key);
  // Extends the expiry of `keys` in every tier (sessions: Redis EXPIRE, the
  // disk tier pins them); on the writer thread, after the writes queued
  // before it.
  void EnqueueTouch(std::vector<std::string> keys, int64_t ttl_seconds);
  // The value of `key` from the first tier that has it ("" if none);
  // synchronous (operator requests only).
  StatusOr<std::string> GetSync(const std::string& key);
  // Removes `keys` from every tier; synchronous.
  Status Delete(const std::vector<std::string>& keys);
  // Waits until the write queue is empty (tests, operator save), at most `wait`.
  bool Flush(std::chrono::milliseconds wait);

  OffloadCounters Counters() const;
  int num_tiers() const { return static_cast<int>(tiers_.size()); }

 private:
  struct Tier {
    std::unique_ptr<KvTier> impl;
    std::atomic<uint64_t> hits{0}, misses{0}, errors{0}, corrupt{0}, read_bytes{0}, written_bytes{0}, writes{0},
        skipped{0}, gets{0}, get_ns{0};
    mutable std::mutex mu;  // guards the back-off state
    std::chrono::steady_clock::time_point down_until{}, last_warning{};
    std::chrono::milliseconds backoff{0};
  };
  using Clock = std::chrono::steady_clock;

  bool Usable(Tier& t);
  void Failed(Tier& t, const Status& st, const char* what);
  void Succeeded(Tier& t);
  void WriterLoop();
  void FetcherLoop();
  FetchResult Lookup(uint64_t ticket, const std::vector<std::string>& keys);

  const OffloadConfig cfg_;
  std::vector<std::unique_ptr<Tier>> tiers_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable write_cv_, fetch_cv_, done_cv_, flushed_cv_;
  std::deque<std::pair<std::string, std::string>> write_queue_;
  std::deque<std::pair<std::vector<std::string>, int64_t>> touch_queue_;
  uint64_t queued_bytes_ = 0;
  bool writing_ = false;
  uint64_t dropped_ = 0;
  std::deque<std::pair<uint64_t, std::vector<std::string>>> fetch_queue_;
  std::vector<FetchResult> fetched_;
  size_t fetching_ = 0;  // queued or running
  std::unordered_map<std::string, Clock::time_point> known_;
  bool stop_ = false;

  std::thread writer_, fetcher_;
};

}  // namespace infera::kv_offload
