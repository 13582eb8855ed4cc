// Request tracing: W3C trace context (the `traceparent` header) and spans
// exported as OTLP/HTTP JSON (OpenTelemetry's protocol) in batches from a
// background thread.
//
// Export never slows or fails a request: spans go into a bounded queue
// (dropped, and counted, when full); the exporter thread posts batches with
// short timeouts and drops a batch the collector does not take.
//
// Thread-safety: TraceContext is a value; OtlpExporter::Export may be called
// from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "infera/status.h"
#include "server/http_client.h"

namespace infera::server {

// n random bytes as lowercase hex (2n characters).
std::string RandomHex(size_t n_bytes);

struct TraceContext {
  std::string trace_id;        // 32 hex
  std::string parent_span_id;  // 16 hex, "" when this request starts the trace
  std::string span_id;         // 16 hex: this request's server span
  bool sampled = true;

  // From a `traceparent` header (version 00: 00-<trace>-<parent>-<flags>);
  // an absent or malformed header starts a new trace.
  static TraceContext FromHeader(const std::string& traceparent);
  // The header for the response (and downstream calls): this span as parent.
  std::string Traceparent() const;
};

struct Span {
  std::string trace_id, span_id, parent_span_id, name;
  bool server = false;  // SPAN_KIND_SERVER, else INTERNAL
  uint64_t start_unix_ns = 0, end_unix_ns = 0;
  std::vector<std::pair<std::string, std::string>> string_attrs;
  std::vector<std::pair<std::string, int64_t>> int_attrs;
  bool error = false;
};

uint64_t UnixNanos(std::chrono::system_clock::time_point t);

class OtlpExporter {
 public:
  // url: http://HOST:PORT/PATH (e.g. http://127.0.0.1:4318/v1/traces).
  static StatusOr<std::unique_ptr<OtlpExporter>> Create(const std::string& url, std::string service_name);
  // Sends what is queued (for at most a few seconds) and stops.
  ~OtlpExporter();

  void Export(Span span);
  uint64_t dropped() const;
  uint64_t exported() const;

 private:
  OtlpExporter(HttpUrl url, std::string service_name);
  void Loop();
  bool Post(const std::string& body);
  std::string BatchJson(const std::vector<Span>& spans) const;

  const HttpUrl url_;
  const std::string service_name_;
  static constexpr size_t kMaxQueue = 8192;
  static constexpr size_t kBatch = 256;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Span> queue_;
  bool stop_ = false;
  uint64_t dropped_ = 0, exported_ = 0, failures_ = 0;
  std::thread thread_;
};

}  // namespace infera::server
