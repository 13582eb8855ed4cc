// The Prometheus registry: exact counts under concurrent updates, histogram
// buckets and sums, and the text / OpenMetrics exposition (names, labels,
// escaping).
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "metrics/registry.h"

namespace infera::metrics::metrics_test {
namespace {

TEST(Metrics, ConcurrentIncrementsAreExact) {
  Registry r;
  Counter& c = r.AddCounter("t_events", "events").Get();
  Family<Counter>& by = r.AddCounter("t_by_kind", "by kind", {"kind"});
  Histogram& h = r.AddHistogram("t_latency_seconds", "latency", {0.5, 1.0}).Get();
  Gauge& g = r.AddGauge("t_level", "level").Get();
  constexpr int kThreads = 8, kIters = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& mine = by.With({t % 2 == 0 ? "even" : "odd"});
      for (int i = 0; i < kIters; ++i) {
        c.Inc();
        mine.Inc(2);
        h.Observe(i % 4 == 0 ? 0.25 : 2.0);
        g.Add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(c.Value(), kThreads * kIters);
  EXPECT_EQ(by.With({"even"}).Value(), 2.0 * kIters * kThreads / 2);
  EXPECT_EQ(by.With({"odd"}).Value(), 2.0 * kIters * kThreads / 2);
  EXPECT_EQ(g.Value(), kThreads * kIters);
  const Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_EQ(s.cumulative[0], static_cast<uint64_t>(kThreads * kIters / 4));  // le 0.5
  EXPECT_EQ(s.cumulative[1], static_cast<uint64_t>(kThreads * kIters / 4));  // le 1
  EXPECT_EQ(s.cumulative[2], static_cast<uint64_t>(kThreads * kIters));      // +Inf
  EXPECT_DOUBLE_EQ(s.sum, kThreads * (kIters / 4 * 0.25 + kIters * 3 / 4 * 2.0));
}

TEST(Metrics, HistogramBucketsAreUpperInclusive) {
  Histogram h({1, 2, 4});
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, -1.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{3, 5, 7, 8}));  // le1: 0,1,-1; le2: +1.5,2; le4: +3,4; inf: +5
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 15.5);
}

TEST(Metrics, TextExposition) {
  Registry r;
  r.AddCounter("t_requests", "Requests\nby \"code\"", {"code"}).With({"a\"b\\c\nd"}).Inc(3);
  r.AddGauge("t_ratio", "A ratio").Get().Set(0.25);
  Histogram& h = r.AddHistogram("t_seconds", "Seconds", {0.1, 1}).Get();
  h.Observe(0.05);
  h.Observe(5);
  int collected = 0;
  r.AddCollector([&] { ++collected; });
  const std::string text = r.Render(false);
  EXPECT_EQ(collected, 1);
  EXPECT_NE(text.find("# HELP t_requests_total Requests\\nby \"code\"\n# TYPE t_requests_total counter\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("t_requests_total{code=\"a\\\"b\\\\c\\nd\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE t_ratio gauge\nt_ratio 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.1\"} 1\nt_seconds_bucket{le=\"1\"} 1\n"
                      "t_seconds_bucket{le=\"+Inf\"} 2\nt_seconds_sum 5.05\nt_seconds_count 2\n"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("# EOF"), std::string::npos);
  const std::string om = r.Render(true);
  EXPECT_NE(om.find("# TYPE t_requests counter\n"), std::string::npos) << om;
  EXPECT_NE(om.find("t_requests_total{code="), std::string::npos);
  EXPECT_EQ(om.substr(om.size() - 6), "# EOF\n");
  EXPECT_NE(std::string(Registry::ContentType(true)).find("openmetrics"), std::string::npos);
}

}  // namespace
}  // namespace infera::metrics::metrics_test
