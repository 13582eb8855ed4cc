#include "server/tracing.h"

#include <random>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/logging.h"

namespace infera::server {

using nlohmann::json;

std::string RandomHex(size_t n_bytes) {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n_bytes);
  uint64_t bits = 0;
  for (size_t i = 0; i < n_bytes; ++i) {
    if (i % 8 == 0) bits = rng();
    const unsigned b = static_cast<unsigned>(bits & 0xff);
    bits >>= 8;
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

namespace {

bool IsHex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  bool nonzero = false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero |= c != '0';
  }
  return nonzero;
}

}  // namespace

TraceContext TraceContext::FromHeader(const std::string& header) {
  TraceContext t;
  t.span_id = RandomHex(8);
  // 00-<32 hex>-<16 hex>-<2 hex>
  if (header.size() >= 55 && header.compare(0, 3, "00-") == 0 && header[35] == '-' && header[52] == '-') {
    const std::string trace = header.substr(3, 32), parent = header.substr(36, 16), flags = header.substr(53, 2);
    if (IsHex(trace, 32) && IsHex(parent, 16) && flags.size() == 2 && std::isxdigit(flags[0]) &&
        std::isxdigit(flags[1])) {
      t.trace_id = trace;
      t.parent_span_id = parent;
      t.sampled = (std::stoi(flags, nullptr, 16) & 1) != 0;
      return t;
    }
  }
  t.trace_id = RandomHex(16);
  return t;
}

std::string TraceContext::Traceparent() const {
  return fmt::format("00-{}-{}-{}", trace_id, span_id, sampled ? "01" : "00");
}

uint64_t UnixNanos(std::chrono::system_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Create(const std::string& url, std::string service_name) {
  auto u = ParseHttpUrl(url);
  if (!u.ok()) {
    return InvalidArgument("--otlp-endpoint must be an http:// URL (OTLP/HTTP JSON), e.g. http://127.0.0.1:4318/v1/traces");
  }
  if (u->path.empty()) u->path = "/v1/traces";
  return std::unique_ptr<OtlpExporter>(new OtlpExporter(std::move(*u), std::move(service_name)));
}

OtlpExporter::OtlpExporter(HttpUrl url, std::string service_name)
    : url_(std::move(url)), service_name_(std::move(service_name)) {
  thread_ = std::thread([this] { Loop(); });
}

OtlpExporter::~OtlpExporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OtlpExporter::Export(Span span) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= kMaxQueue) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(span));
    if (queue_.size() < kBatch) return;
  }
  cv_.notify_one();
}

uint64_t OtlpExporter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

uint64_t OtlpExporter::exported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exported_;
}

std::string OtlpExporter::BatchJson(const std::vector<Span>& spans) const {
  json out = json::array();
  for (const Span& s : spans) {
    json attrs = json::array();
    for (const auto& [k, v] : s.string_attrs) attrs.push_back({{"key", k}, {"value", {{"stringValue", v}}}});
    // OTLP/JSON writes 64-bit integers as strings.
    for (const auto& [k, v] : s.int_attrs) attrs.push_back({{"key", k}, {"value", {{"intValue", std::to_string(v)}}}});
    json span = {{"traceId", s.trace_id},
                 {"spanId", s.span_id},
                 {"name", s.name},
                 {"kind", s.server ? 2 : 1},
                 {"startTimeUnixNano", std::to_string(s.start_unix_ns)},
                 {"endTimeUnixNano", std::to_string(s.end_unix_ns)},
                 {"attributes", attrs},
                 {"status", {{"code", s.error ? 2 : 1}}}};
    if (!s.parent_span_id.empty()) span["parentSpanId"] = s.parent_span_id;
    out.push_back(std::move(span));
  }
  json body = {{"resourceSpans",
                json::array({{{"resource",
                               {{"attributes", json::array({{{"key", "service.name"},
                                                             {"value", {{"stringValue", service_name_}}}}})}}},
                              {"scopeSpans", json::array({{{"scope", {{"name", "infera"}}}, {"spans", out}}})}}})}};
  return DumpJson(body);
}

bool OtlpExporter::Post(const std::string& body) {
  auto r = HttpFetch(url_, "POST", url_.path, body, std::chrono::seconds(2));
  return r.ok() && r->status / 100 == 2;
}

void OtlpExporter::Loop() {
  for (;;) {
    std::vector<Span> batch;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_ || queue_.size() >= kBatch; });
      stop = stop_;
      while (!queue_.empty() && batch.size() < kBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!batch.empty()) {
      const bool ok = Post(BatchJson(batch));
      std::lock_guard<std::mutex> lock(mu_);
      if (ok) {
        exported_ += batch.size();
      } else {
        dropped_ += batch.size();
        // One warning per 100 failed batches: a collector that is down must not flood the log.
        if (failures_++ % 100 == 0) {
          LOG_WARN("otlp: cannot export spans to http://{}:{}{} ({} spans dropped so far)", url_.host, url_.port,
                   url_.path, dropped_);
        }
      }
    }
    if (stop) {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() || failures_ > 0) return;  // drain once more only while the collector answers
    }
  }
}

}  // namespace infera::server
