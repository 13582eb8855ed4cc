#include "metrics/registry.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace infera::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // First bucket whose upper bound is >= v (le semantics); NaN goes to +Inf.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[std::isnan(v) ? bounds_.size() : i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(total);
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

template <typename M>
M& Family<M>::With(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    std::unique_ptr<M> m;
    if constexpr (std::is_same_v<M, Histogram>) {
      m = std::make_unique<Histogram>(buckets_);
    } else {
      m = std::make_unique<M>();
    }
    it = children_.emplace(values, std::move(m)).first;
  }
  return *it->second;
}

template <typename M>
void Family<M>::ForEach(const std::function<void(const std::vector<std::string>&, const M&)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, m] : children_) fn(values, *m);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
          20.0, 40.0, 80.0, 160.0, 320.0, 600.0};
}

std::vector<double> TokenBuckets() {
  std::vector<double> b;
  for (double v = 1; v <= 131072; v *= 2) b.push_back(v);
  return b;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  counters_.push_back(std::make_unique<Family<Counter>>(name, help, std::move(label_names)));
  entries_.push_back({Type::kCounter, counters_.back().get()});
  return *counters_.back();
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  gauges_.push_back(std::make_unique<Family<Gauge>>(name, help, std::move(label_names)));
  entries_.push_back({Type::kGauge, gauges_.back().get()});
  return *gauges_.back();
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> buckets, std::vector<std::string> label_names) {
  histograms_.push_back(std::make_unique<Family<Histogram>>(name, help, std::move(label_names), std::move(buckets)));
  entries_.push_back({Type::kHistogram, histograms_.back().get()});
  return *histograms_.back();
}

void Registry::AddCollector(std::function<void()> fn) { collectors_.push_back(std::move(fn)); }

const char* Registry::ContentType(bool openmetrics) {
  return openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                     : "text/plain; version=0.0.4; charset=utf-8";
}

namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// {a="x",b="y"} (plus an extra label), or "" without labels.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = {}, const std::string& extra_value = {}) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    s += fmt::format("{}{}=\"{}\"", s.empty() ? "" : ",", names[i], EscapeLabel(values[i]));
  }
  if (!extra_name.empty()) s += fmt::format("{}{}=\"{}\"", s.empty() ? "" : ",", extra_name, extra_value);
  return s.empty() ? s : "{" + s + "}";
}

}  // namespace

std::string Registry::Render(bool openmetrics) const {
  std::lock_guard<std::mutex> lock(render_mu_);
  for (const auto& fn : collectors_) fn();
  std::string out;
  auto header = [&](const std::string& family, const std::string& help, const char* type) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family, EscapeHelp(help), family, type);
  };
  for (const Entry& e : entries_) {
    if (e.type == Type::kCounter) {
      const auto& f = *static_cast<const Family<Counter>*>(e.family);
      // Text format: the family is named by its sample (name_total); OpenMetrics: without the suffix.
      header(openmetrics ? f.name() : f.name() + "_total", f.help(), "counter");
      f.ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        out += fmt::format("{}_total{} {}\n", f.name(), LabelSet(f.label_names(), values), Number(c.Value()));
      });
    } else if (e.type == Type::kGauge) {
      const auto& f = *static_cast<const Family<Gauge>*>(e.family);
      header(f.name(), f.help(), "gauge");
      f.ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        out += fmt::format("{}{} {}\n", f.name(), LabelSet(f.label_names(), values), Number(g.Value()));
      });
    } else {
      const auto& f = *static_cast<const Family<Histogram>*>(e.family);
      header(f.name(), f.help(), "histogram");
      f.ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        const Histogram::Snapshot s = h.Snap();
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          const std::string le = i < h.bounds().size() ? Number(h.bounds()[i]) : "+Inf";
          out += fmt::format("{}_bucket{} {}\n", f.name(), LabelSet(f.label_names(), values, "le", le),
                             s.cumulative[i]);
        }
        out += fmt::format("{}_sum{} {}\n", f.name(), LabelSet(f.label_names(), values), Number(s.sum));
        out += fmt::format("{}_count{} {}\n", f.name(), LabelSet(f.label_names(), values), s.count);
      });
    }
  }
  if (openmetrics) out += "# EOF\n";
  return out;
}

}  // namespace infera::metrics
