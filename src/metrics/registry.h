// A small Prometheus metrics registry (Debian has no C++ client library):
// counters, gauges and histograms, optionally with labels, rendered in the
// Prometheus text format 0.0.4 or OpenMetrics 1.0.
//
// Hot path: Inc / Set / Observe on a metric are lock-free (relaxed atomics),
// so recording per token is cheap. Looking up a labelled child takes the
// family's mutex: look children up once and keep the reference (references
// stay valid for the registry's lifetime).
//
// Thread-safety: everything may be called from any thread. Families are
// registered at start-up (before concurrent use).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace infera::metrics {

class Counter {
 public:
  void Inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds`: upper bounds, strictly increasing (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Snap() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket (not cumulative), +Inf last
  std::atomic<double> sum_{0};
};

enum class Type { kCounter, kGauge, kHistogram };

// One metric name with its label names; children per label values.
template <typename M>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> buckets = {})
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)),
        buckets_(std::move(buckets)) {}

  // The child for these label values (in label-name order), created on first use.
  M& With(const std::vector<std::string>& values);
  // The child of a family without labels.
  M& Get() { return With({}); }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Calls fn(values, metric) for every child, in label order.
  void ForEach(const std::function<void(const std::vector<std::string>&, const M&)>& fn) const;

 private:
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;
};

// Bucket bounds for LLM latencies: 1 ms .. 10 min.
std::vector<double> LatencyBuckets();
// Bucket bounds for token counts: 1 .. 128k, powers of 2.
std::vector<double> TokenBuckets();

class Registry {
 public:
  // Names without the _total suffix for counters (rendering adds it).
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help, std::vector<double> buckets,
                                  std::vector<std::string> label_names = {});
  // Runs before every Render (to refresh gauges read from elsewhere).
  void AddCollector(std::function<void()> fn);

  // openmetrics: OpenMetrics 1.0 (ends with "# EOF"), else text format 0.0.4.
  std::string Render(bool openmetrics) const;
  static const char* ContentType(bool openmetrics);

 private:
  struct Entry {
    Type type;
    void* family;  // Family<Counter|Gauge|Histogram>*, owned by the holders below
  };
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<Family<Counter>>> counters_;
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_;
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_;
  std::vector<std::function<void()>> collectors_;
  mutable std::mutex render_mu_;  // one scrape at a time (collectors write gauges)
};

}  // namespace infera::metrics
