#include "server/server_metrics.h"

#include <chrono>

#include <unistd.h>

#include <cstdio>

namespace infera::server {

using metrics::LatencyBuckets;
using metrics::TokenBuckets;

namespace {

// Resident set size of this process, from /proc/self/statm (0 if unreadable).
double ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0.0;
}

std::vector<double> TpotBuckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
          0.75, 1.0, 2.5, 5.0, 10.0};
}

}  // namespace

ServerMetrics::ServerMetrics()
    : http_requests_(registry_.AddCounter("infera_http_requests", "HTTP requests answered, by endpoint and status",
                                          {"endpoint", "status"})),
      request_success_(registry_.AddCounter("infera_request_success",
                                            "Engine requests (one per choice) finished, by finish reason",
                                            {"finished_reason"})),
      prompt_tokens_(registry_.AddCounter("infera_prompt_tokens", "Prompt tokens of finished requests").Get()),
      generation_tokens_(registry_.AddCounter("infera_generation_tokens", "Generated tokens").Get()),
      prefix_queries_(registry_.AddCounter("infera_prefix_cache_queries",
                                           "Prompt tokens looked up in the prefix cache").Get()),
      prefix_hits_(registry_.AddCounter("infera_prefix_cache_hits", "Prompt tokens found in the prefix cache").Get()),
      preemptions_(registry_.AddCounter("infera_num_preemptions",
                                        "Requests preempted (KV blocks freed, recomputed later)").Get()),
      steps_(registry_.AddCounter("infera_engine_steps", "Engine iterations that computed tokens").Get()),
      spec_drafted_(registry_.AddCounter("infera_spec_decode_num_draft_tokens",
                                         "Speculative decoding: drafted tokens verified").Get()),
      spec_accepted_(registry_.AddCounter("infera_spec_decode_num_accepted_tokens",
                                          "Speculative decoding: drafted tokens accepted").Get()),
      ttft_(registry_.AddHistogram("infera_time_to_first_token_seconds",
                                   "Time from request arrival to its first generated token", LatencyBuckets()).Get()),
      itl_(registry_.AddHistogram("infera_inter_token_latency_seconds",
                                  "Time between consecutive tokens of a request", TpotBuckets()).Get()),
      tpot_(registry_.AddHistogram("infera_time_per_output_token_seconds",
                                   "Per request: (end-to-end - time to first token) / (generated tokens - 1)",
                                   TpotBuckets()).Get()),
      e2e_(registry_.AddHistogram("infera_e2e_request_latency_seconds",
                                  "Time from request arrival to its last token", LatencyBuckets()).Get()),
      queue_(registry_.AddHistogram("infera_request_queue_time_seconds",
                                    "Time a request waited before it was first scheduled", LatencyBuckets()).Get()),
      prefill_(registry_.AddHistogram("infera_request_prefill_time_seconds",
                                      "Time from first scheduled to first token (prompt processing)",
                                      LatencyBuckets()).Get()),
      decode_(registry_.AddHistogram("infera_request_decode_time_seconds", "Time from first token to the last",
                                     LatencyBuckets()).Get()),
      prompt_len_(registry_.AddHistogram("infera_request_prompt_tokens", "Prompt length of finished requests",
                                         TokenBuckets()).Get()),
      generation_len_(registry_.AddHistogram("infera_request_generation_tokens",
                                             "Generated tokens of finished requests", TokenBuckets()).Get()),
      iteration_tokens_(registry_.AddHistogram("infera_iteration_tokens",
                                               "Tokens computed per engine step (batch size in tokens)",
                                               TokenBuckets()).Get()),
      running_(registry_.AddGauge("infera_num_requests_running", "Requests in the running batch").Get()),
      waiting_(registry_.AddGauge("infera_num_requests_waiting", "Requests waiting to be scheduled").Get()),
      preempted_(registry_.AddGauge("infera_num_requests_preempted",
                                    "Waiting requests that were preempted and will be recomputed").Get()),
      kv_used_(registry_.AddGauge("infera_kv_blocks_used", "KV cache blocks referenced by requests").Get()),
      kv_total_(registry_.AddGauge("infera_kv_blocks_capacity", "KV cache blocks in the pool").Get()),
      kv_ratio_(registry_.AddGauge("infera_kv_cache_usage_ratio",
                                   "Fraction of KV cache blocks in use (1 = full)").Get()),
      model_bytes_(registry_.AddGauge("infera_model_weight_bytes", "Size of the model file(s)").Get()),
      rss_(registry_.AddGauge("process_resident_memory_bytes", "Resident memory of the process").Get()),
      start_time_(registry_.AddGauge("process_start_time_seconds", "Start time of the process since the Unix epoch")
                      .Get()),
      ready_(registry_.AddGauge("infera_ready", "1 when the model is loaded and requests are accepted").Get()),
      build_info_(registry_.AddGauge("infera_build_info", "Build: version, commit, CPU kernel variant in use",
                                     {"version", "commit", "kernel"})) {
  auto tier_counter = [this](const char* name, const char* help) { return &registry_.AddCounter(name, help, {"tier"}); };
  offload_.hits = tier_counter("infera_kv_offload_hits", "KV offload: blocks found in the tier");
  offload_.misses = tier_counter("infera_kv_offload_misses", "KV offload: blocks looked up and not found in the tier");
  offload_.errors = tier_counter("infera_kv_offload_errors",
                                 "KV offload: failed tier calls (timeouts, lost connections, full); recomputed");
  offload_.corrupt = tier_counter("infera_kv_offload_corrupt_blocks",
                                  "KV offload: blocks that failed verification (checksum, model, tokens); recomputed");
  offload_.read_bytes = tier_counter("infera_kv_offload_read_bytes", "KV offload: bytes read from the tier");
  offload_.written_bytes = tier_counter("infera_kv_offload_written_bytes", "KV offload: bytes written to the tier");
  offload_.writes = tier_counter("infera_kv_offload_written_blocks", "KV offload: blocks written to the tier");
  offload_.skipped = tier_counter("infera_kv_offload_skipped_calls",
                                  "KV offload: calls skipped while the tier backs off after a failure");
  offload_.lookups = tier_counter("infera_kv_offload_lookups", "KV offload: lookups (one per request prefix)");
  offload_.lookup_seconds = tier_counter("infera_kv_offload_lookup_seconds", "KV offload: total time of lookups");
  offload_.healthy = &registry_.AddGauge("infera_kv_offload_healthy", "KV offload: 1 unless the tier is backing off",
                                         {"tier"});
  offload_.dropped = &registry_.AddCounter("infera_kv_offload_dropped_writes",
                                           "KV offload: blocks not written because the write queue was full").Get();
  offload_.loaded = &registry_.AddCounter("infera_kv_offload_loaded_blocks",
                                          "KV offload: blocks loaded from a tier into the RAM cache").Get();
  // Families with labels show up from the first scrape with their common children.
  for (const char* reason : {"stop", "length", "abort", "error"}) request_success_.With({reason});
  start_time_.Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  registry_.AddCollector([this] { Collect(); });
}

void ServerMetrics::AttachEngine(const AsyncEngine* engine, uint64_t model_bytes, const BuildInfo& build) {
  model_bytes_.Set(static_cast<double>(model_bytes));
  build_info_.With({build.version, build.commit, build.kernel}).Set(1);
  engine_.store(engine);
}

void ServerMetrics::HttpRequest(const std::string& endpoint, int status) {
  http_requests_.With({endpoint, std::to_string(status)}).Inc();
}

void ServerMetrics::RequestFinished(const Finished& f) {
  request_success_.With({f.finish_reason}).Inc();
  prompt_tokens_.Inc(f.prompt_tokens);
  prompt_len_.Observe(f.prompt_tokens);
  generation_len_.Observe(f.completion_tokens);
  queue_.Observe(f.queue_s);
  e2e_.Observe(f.e2e_s);
  if (f.completion_tokens > 0) {
    prefill_.Observe(f.prefill_s);
    decode_.Observe(f.decode_s);
  }
  if (f.tpot_s >= 0) tpot_.Observe(f.tpot_s);
}

void ServerMetrics::Collect() {
  rss_.Set(ResidentBytes());
  const AsyncEngine* engine = engine_.load();
  ready_.Set(engine != nullptr ? 1 : 0);
  if (engine == nullptr) return;
  const EngineStats s = engine->Stats();
  running_.Set(s.num_running);
  waiting_.Set(s.num_waiting);
  preempted_.Set(s.num_preempted);
  kv_used_.Set(s.kv_blocks_used);
  kv_total_.Set(s.kv_blocks_total);
  kv_ratio_.Set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  auto mirror = [](metrics::Counter& c, uint64_t now, uint64_t* seen) {
    if (now > *seen) c.Inc(static_cast<double>(now - *seen));
    *seen = now;
  };
  mirror(prefix_queries_, s.prefix_cache_queries, &seen_queries_);
  mirror(prefix_hits_, s.prefix_cache_hits, &seen_hits_);
  mirror(preemptions_, s.num_preemptions, &seen_preemptions_);
  mirror(steps_, s.steps, &seen_steps_);
  mirror(spec_drafted_, s.spec_draft_tokens, &seen_spec_drafted_);
  mirror(spec_accepted_, s.spec_accepted_tokens, &seen_spec_accepted_);
  CollectOffload(s);
}

void ServerMetrics::CollectOffload(const EngineStats& s) {
  for (const KvTierStats& t : s.kv_offload_tiers) {
    KvTierStats& was = seen_tiers_[t.tier];
    const std::vector<std::string> label = {t.tier};
    auto inc = [&](metrics::Family<metrics::Counter>* f, double now, double before) {
      metrics::Counter& c = f->With(label);
      if (now > before) c.Inc(now - before);
    };
    inc(offload_.hits, t.hits, was.hits);
    inc(offload_.misses, t.misses, was.misses);
    inc(offload_.errors, t.errors, was.errors);
    inc(offload_.corrupt, t.corrupt, was.corrupt);
    inc(offload_.read_bytes, t.read_bytes, was.read_bytes);
    inc(offload_.written_bytes, t.written_bytes, was.written_bytes);
    inc(offload_.writes, t.writes, was.writes);
    inc(offload_.skipped, t.skipped, was.skipped);
    inc(offload_.lookups, t.gets, was.gets);
    inc(offload_.lookup_seconds, t.get_seconds, was.get_seconds);
    offload_.healthy->With(label).Set(t.healthy ? 1 : 0);
    was = t;
  }
  if (!s.kv_offload_tiers.empty()) {
    if (s.kv_offload_dropped_writes > seen_dropped_) offload_.dropped->Inc(s.kv_offload_dropped_writes - seen_dropped_);
    if (s.kv_offload_loaded_blocks > seen_loaded_) offload_.loaded->Inc(s.kv_offload_loaded_blocks - seen_loaded_);
    seen_dropped_ = s.kv_offload_dropped_writes;
    seen_loaded_ = s.kv_offload_loaded_blocks;
  }
}

}  // namespace infera::server
