// The server's Prometheus metrics (names modelled on vLLM's, prefixed
// infera_): HTTP requests, per-request latencies and token counts, engine
// gauges. docs/operations.md lists every metric with its meaning.
//
// Thread-safety: every method may be called from any thread; recording is
// lock-free (see metrics/registry.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/async_engine.h"
#include "metrics/registry.h"

namespace infera::server {

struct BuildInfo {
  std::string version, commit, kernel;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // The engine to read gauges from at scrape time (set once it is loaded).
  void AttachEngine(const AsyncEngine* engine, uint64_t model_bytes, const BuildInfo& build);

  // A response was started with `status` on `endpoint` (a route, or "other").
  void HttpRequest(const std::string& endpoint, int status);
  // Per engine request (one choice).
  void FirstToken(double ttft_seconds) { ttft_.Observe(ttft_seconds); }
  void InterToken(double seconds) { itl_.Observe(seconds); }
  void GenerationTokens(int64_t n) { generation_tokens_.Inc(static_cast<double>(n)); }
  struct Finished {
    const char* finish_reason;
    int32_t prompt_tokens, completion_tokens;
    double queue_s, prefill_s, decode_s, e2e_s, tpot_s;  // tpot_s < 0: not defined (< 2 tokens)
  };
  void RequestFinished(const Finished& f);
  // One engine step computed `tokens` tokens.
  void EngineStep(int32_t tokens) { iteration_tokens_.Observe(tokens); }

  // The exposition (text 0.0.4, or OpenMetrics).
  std::string Render(bool openmetrics) { return registry_.Render(openmetrics); }
  static const char* ContentType(bool openmetrics) { return metrics::Registry::ContentType(openmetrics); }
  // For metrics the server does not know itself (a split model's ranks).
  metrics::Registry& registry() { return registry_; }

 private:
  void Collect();

  metrics::Registry registry_;
  metrics::Family<metrics::Counter>& http_requests_;
  metrics::Family<metrics::Counter>& request_success_;
  metrics::Counter& prompt_tokens_;
  metrics::Counter& generation_tokens_;
  metrics::Counter& prefix_queries_;
  metrics::Counter& prefix_hits_;
  metrics::Counter& preemptions_;
  metrics::Counter& steps_;
  metrics::Counter& spec_drafted_;
  metrics::Counter& spec_accepted_;
  metrics::Histogram& ttft_;
  metrics::Histogram& itl_;
  metrics::Histogram& tpot_;
  metrics::Histogram& e2e_;
  metrics::Histogram& queue_;
  metrics::Histogram& prefill_;
  metrics::Histogram& decode_;
  metrics::Histogram& prompt_len_;
  metrics::Histogram& generation_len_;
  metrics::Histogram& iteration_tokens_;
  metrics::Gauge& running_;
  metrics::Gauge& waiting_;
  metrics::Gauge& preempted_;
  metrics::Gauge& kv_used_;
  metrics::Gauge& kv_total_;
  metrics::Gauge& kv_ratio_;
  metrics::Gauge& model_bytes_;
  metrics::Gauge& rss_;
  metrics::Gauge& start_time_;
  metrics::Gauge& ready_;
  metrics::Family<metrics::Gauge>& build_info_;

  // KV offload tiers, labelled by tier (children appear when tiers exist).
  struct OffloadFamilies {
    metrics::Family<metrics::Counter>*hits, *misses, *errors, *corrupt, *read_bytes, *written_bytes, *writes, *skipped,
        *lookups, *lookup_seconds;
    metrics::Family<metrics::Gauge>* healthy;
    metrics::Counter *dropped, *loaded;
  } offload_;
  void CollectOffload(const EngineStats& s);
  std::map<std::string, KvTierStats> seen_tiers_;
  uint64_t seen_dropped_ = 0, seen_loaded_ = 0;

  std::atomic<const AsyncEngine*> engine_{nullptr};
  // Engine counters already mirrored (Collect runs under the registry's render lock).
  uint64_t seen_queries_ = 0, seen_hits_ = 0, seen_preemptions_ = 0, seen_steps_ = 0;
  uint64_t seen_spec_drafted_ = 0, seen_spec_accepted_ = 0;
};

}  // namespace infera::server
