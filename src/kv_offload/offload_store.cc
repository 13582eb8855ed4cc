#include "kv_offload/offload_store.h"

#include <algorithm>

#include "base/logging.h"
#include "kv_offload/disk_tier.h"
#include "kv_offload/redis_tier.h"

namespace infera::kv_offload {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{1000};
constexpr std::chrono::milliseconds kMaxBackoff{10000};
constexpr std::chrono::milliseconds kDiskFullBackoff{60000};
constexpr std::chrono::seconds kWarnEvery{10};
constexpr size_t kWriteBatch = 32;
constexpr size_t kMaxKnown = 1 << 20;

}  // namespace

StatusOr<std::unique_ptr<OffloadStore>> OffloadStore::Create(const OffloadConfig& cfg) {
  std::vector<std::unique_ptr<KvTier>> tiers;
  if (!cfg.dir.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> d, DiskTier::Open(cfg.dir, cfg.dir_max_bytes));
    LOG_INFO("kv offload: disk tier {} ({} blocks, {:.1f} MiB of {:.1f} MiB)", cfg.dir, d->num_files(),
             d->bytes() / 1048576.0, cfg.dir_max_bytes / 1048576.0);
    tiers.push_back(std::move(d));
  }
  if (!cfg.redis_url.empty()) {
    ASSIGN_OR_RETURN(RedisUrl u, ParseRedisUrl(cfg.redis_url));
    LOG_INFO("kv offload: Redis tier {}:{}/{} (ttl {} s, timeout {} ms)", u.host, u.port, u.db, cfg.ttl_seconds,
             cfg.timeout_ms);
    tiers.push_back(std::make_unique<RedisTier>(u, cfg.timeout_ms));
  }
  if (tiers.empty()) return InvalidArgument("kv offload: no tier configured");
  return std::make_unique<OffloadStore>(std::move(tiers), cfg);
}

OffloadStore::OffloadStore(std::vector<std::unique_ptr<KvTier>> tiers, const OffloadConfig& cfg) : cfg_(cfg) {
  for (auto& t : tiers) {
    tiers_.push_back(std::make_unique<Tier>());
    tiers_.back()->impl = std::move(t);
  }
  writer_ = std::thread([this] { WriterLoop(); });
  fetcher_ = std::thread([this] { FetcherLoop(); });
}

OffloadStore::~OffloadStore() {
  // Blocks computed before a clean shutdown reach the tiers (bounded: a
  // tier that hangs costs its timeouts, then what is left is dropped).
  if (!Flush(std::chrono::seconds(10))) LOG_WARN("kv offload: write queue not drained at shutdown; blocks dropped");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  write_cv_.notify_all();
  fetch_cv_.notify_all();
  writer_.join();
  fetcher_.join();
}

bool OffloadStore::Usable(Tier& t) {
  std::lock_guard<std::mutex> lock(t.mu);
  if (Clock::now() < t.down_until) {
    t.skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void OffloadStore::Failed(Tier& t, const Status& st, const char* what) {
  t.errors.fetch_add(1, std::memory_order_relaxed);
  {
    // The tier may have lost what it held (a restarted Redis): write blocks
    // again when they are next computed.
    std::lock_guard<std::mutex> lock(mu_);
    known_.clear();
  }
  std::lock_guard<std::mutex> lock(t.mu);
  const auto now = Clock::now();
  t.backoff = st.code() == StatusCode::kResourceExhausted && std::string(t.impl->name()) == "disk"
                  ? kDiskFullBackoff
                  : std::min(kMaxBackoff, t.backoff.count() == 0 ? kFirstBackoff : t.backoff * 2);
  t.down_until = now + t.backoff;
  if (now - t.last_warning >= kWarnEvery) {
    t.last_warning = now;
    LOG_WARN("kv offload: {} tier {} failed ({}); skipping it for {} ms, requests recompute", t.impl->name(), what,
             st.message(), t.backoff.count());
  }
}

void OffloadStore::Succeeded(Tier& t) {
  std::lock_guard<std::mutex> lock(t.mu);
  t.backoff = std::chrono::milliseconds(0);
}

bool OffloadStore::Enqueue(std::string key, std::string blob) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + blob.size() > cfg_.max_queue_bytes) {
      ++dropped_;
      return false;
    }
    queued_bytes_ += blob.size();
    write_queue_.emplace_back(std::move(key), std::move(blob));
  }
  write_cv_.notify_one();
  return true;
}

void OffloadStore::WriterLoop() {
  for (;;) {
    std::vector<std::pair<std::string, std::string>> batch;
    std::deque<std::pair<std::vector<std::string>, int64_t>> touches;
    {
      std::unique_lock<std::mutex> lock(mu_);
      write_cv_.wait(lock, [&] { return stop_ || !write_queue_.empty() || !touch_queue_.empty(); });
      if (stop_) return;
      while (!write_queue_.empty() && batch.size() < kWriteBatch) {
        batch.push_back(std::move(write_queue_.front()));
        write_queue_.pop_front();
      }
      if (batch.empty()) touches.swap(touch_queue_);
      writing_ = true;
    }
    for (const auto& [keys, ttl] : touches) {
      for (auto& t : tiers_) {
        if (!Usable(*t)) continue;
        Status st = t->impl->Touch(keys, ttl);
        if (!st.ok()) Failed(*t, st, "touch");
      }
    }
    uint64_t bytes = 0;
    for (const auto& kv : batch) bytes += kv.second.size();
    bool everywhere = true;  // stored in every tier
    for (auto& t : tiers_) {
      if (!Usable(*t)) {
        everywhere = false;
        continue;
      }
      Status st = t->impl->Put(batch, cfg_.ttl_seconds);
      if (st.ok()) {
        Succeeded(*t);
        t->writes.fetch_add(batch.size(), std::memory_order_relaxed);
        t->written_bytes.fetch_add(bytes, std::memory_order_relaxed);
      } else {
        everywhere = false;
        Failed(*t, st, "write");
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_bytes_ -= bytes;
      writing_ = false;
      const auto now = Clock::now();
      if (known_.size() > kMaxKnown) known_.clear();
      for (const auto& kv : batch) {
        if (everywhere) known_[kv.first] = now;
        else known_.erase(kv.first);  // written again when next computed
      }
    }
    flushed_cv_.notify_all();
  }
}

void OffloadStore::Fetch(uint64_t ticket, std::vector<std::string> keys) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fetch_queue_.emplace_back(ticket, std::move(keys));
    ++fetching_;
  }
  fetch_cv_.notify_one();
}

FetchResult OffloadStore::Lookup(uint64_t ticket, const std::vector<std::string>& keys) {
  FetchResult r;
  r.ticket = ticket;
  for (size_t ti = 0; ti < tiers_.size() && r.values.size() < keys.size(); ++ti) {
    Tier& t = *tiers_[ti];
    if (!Usable(t)) continue;
    const std::vector<std::string> rest(keys.begin() + static_cast<std::ptrdiff_t>(r.values.size()), keys.end());
    const auto t0 = Clock::now();
    StatusOr<std::vector<Blob>> got = t.impl->Get(rest);
    t.gets.fetch_add(1, std::memory_order_relaxed);
    t.get_ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()),
                       std::memory_order_relaxed);
    if (!got.ok()) {
      Failed(t, got.status(), "read");
      continue;
    }
    Succeeded(t);
    size_t n = 0;
    while (n < got->size() && !(*got)[n].empty()) ++n;
    t.hits.fetch_add(n, std::memory_order_relaxed);
    t.misses.fetch_add(rest.size() - n, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      t.read_bytes.fetch_add((*got)[i].bytes.size(), std::memory_order_relaxed);
      r.values.push_back(std::move((*got)[i]));
      r.tier_of.push_back(static_cast<int>(ti));
    }
  }
  return r;
}

void OffloadStore::FetcherLoop() {
  for (;;) {
    std::pair<uint64_t, std::vector<std::string>> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      fetch_cv_.wait(lock, [&] { return stop_ || !fetch_queue_.empty(); });
      if (stop_) return;
      job = std::move(fetch_queue_.front());
      fetch_queue_.pop_front();
    }
    FetchResult r = Lookup(job.first, job.second);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fetched_.push_back(std::move(r));
      --fetching_;
    }
    done_cv_.notify_all();
  }
}

std::vector<FetchResult> OffloadStore::TakeFetched(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (fetched_.empty() && wait.count() > 0 && fetching_ > 0) {
    done_cv_.wait_for(lock, wait, [&] { return !fetched_.empty(); });
  }
  std::vector<FetchResult> out;
  out.swap(fetched_);
  return out;
}

size_t OffloadStore::fetches_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetching_ + fetched_.size();
}

void OffloadStore::ReportCorrupt(int tier, const std::string& key) {
  Tier& t = *tiers_.at(static_cast<size_t>(tier));
  t.corrupt.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(t.mu);
    const auto now = Clock::now();
    if (now - t.last_warning >= kWarnEvery) {
      t.last_warning = now;
      LOG_WARN("kv offload: {} tier returned a damaged or foreign block ({}); recomputing it", t.impl->name(), key);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    known_.erase(key);
  }
  if (Usable(t)) {
    Status st = t.impl->Delete({key});
    if (!st.ok()) Failed(t, st, "delete");
  }
}

bool OffloadStore::Known(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = known_.find(key);
  if (it == known_.end()) return false;
  // Redis may have expired it since: write again after half the TTL.
  return cfg_.ttl_seconds <= 0 || Clock::now() - it->second < std::chrono::seconds(cfg_.ttl_seconds) / 2;
}

void OffloadStore::MarkKnown(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_.size() > kMaxKnown) known_.clear();
  known_[key] = Clock::now();
}

void OffloadStore::EnqueueTouch(std::vector<std::string> keys, int64_t ttl_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    touch_queue_.emplace_back(std::move(keys), ttl_seconds);
  }
  write_cv_.notify_one();
}

StatusOr<std::string> OffloadStore::GetSync(const std::string& key) {
  Status last;
  for (auto& t : tiers_) {
    if (!Usable(*t)) continue;
    auto got = t->impl->Get({key});
    if (!got.ok()) {
      Failed(*t, got.status(), "read");
      last = got.status();
      continue;
    }
    if (!(*got)[0].empty()) return std::string((*got)[0].bytes);
  }
  if (!last.ok()) return last;
  return std::string();
}

Status OffloadStore::Delete(const std::vector<std::string>& keys) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& k : keys) known_.erase(k);
  }
  Status first;
  for (auto& t : tiers_) {
    Status st = t->impl->Delete(keys);
    if (!st.ok()) {
      Failed(*t, st, "delete");
      if (first.ok()) first = st;
    }
  }
  return first;
}

bool OffloadStore::Flush(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return flushed_cv_.wait_for(lock, wait,
                              [&] { return write_queue_.empty() && touch_queue_.empty() && !writing_; });
}

OffloadCounters OffloadStore::Counters() const {
  OffloadCounters c;
  for (const auto& tp : tiers_) {
    const Tier& t = *tp;
    TierCounters x;
    x.tier = t.impl->name();
    x.hits = t.hits.load();
    x.misses = t.misses.load();
    x.errors = t.errors.load();
    x.corrupt = t.corrupt.load();
    x.read_bytes = t.read_bytes.load();
    x.written_bytes = t.written_bytes.load();
    x.writes = t.writes.load();
    x.skipped = t.skipped.load();
    x.gets = t.gets.load();
    x.get_seconds = t.get_ns.load() * 1e-9;
    {
      std::lock_guard<std::mutex> lock(t.mu);
      x.healthy = Clock::now() >= t.down_until;
    }
    c.tiers.push_back(std::move(x));
  }
  std::lock_guard<std::mutex> lock(mu_);
  c.dropped_writes = dropped_;
  c.queued_bytes = queued_bytes_;
  return c;
}

}  // namespace infera::kv_offload
