// infera top: a terminal view of a running server, from its /metrics —
// requests/s, tokens/s, time to first token p50/p95, KV cache usage,
// running/waiting requests — refreshed every --interval seconds.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "server/http_client.h"
#include "tools/commands.h"

namespace infera::cli {
namespace {

struct TopArgs {
  std::string url = "http://127.0.0.1:8080";
  double interval = 2;
  int iterations = 0;  // 0: until interrupted
};

// series (name + labels as written) -> value
using Samples = std::map<std::string, double>;

bool Scrape(const server::HttpUrl& url, Samples* out, std::string* error) {
  auto r = server::HttpFetch(url, "GET", "/metrics", "", std::chrono::seconds(5));
  if (!r.ok()) {
    *error = r.status().message();
    return false;
  }
  if (r->status != 200) {
    *error = fmt::format("/metrics answered {}", r->status);
    return false;
  }
  out->clear();
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    (*out)[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return true;
}

double SumPrefix(const Samples& s, const std::string& prefix) {
  double total = 0;
  for (auto it = s.lower_bound(prefix); it != s.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    total += it->second;
  }
  return total;
}

// Quantile q of a histogram from the bucket increases between two scrapes
// (Prometheus' histogram_quantile, linear within a bucket); NaN if empty.
double Quantile(const Samples& a, const Samples& b, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // (le, count increase)
  const std::string prefix = name + "_bucket{le=\"";
  for (auto it = b.lower_bound(prefix); it != b.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const std::string le = it->first.substr(prefix.size(), it->first.size() - prefix.size() - 2);
    const double bound = le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr);
    auto old = a.find(it->first);
    buckets.emplace_back(bound, it->second - (old == a.end() ? 0 : old->second));
  }
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty() || buckets.back().second <= 0) return NAN;
  const double rank = q * buckets.back().second;
  double prev_bound = 0, prev_count = 0;
  for (const auto& [bound, count] : buckets) {
    if (count >= rank) {
      if (std::isinf(bound)) return prev_bound;
      return prev_bound + (bound - prev_bound) * (count > prev_count ? (rank - prev_count) / (count - prev_count) : 1);
    }
    prev_bound = bound;
    prev_count = count;
  }
  return prev_bound;
}

std::string Ms(double seconds) { return std::isnan(seconds) ? "    -" : fmt::format("{:5.0f}", seconds * 1e3); }

int Top(const TopArgs& a) {
  auto url = server::ParseHttpUrl(a.url);
  if (!url.ok()) return ReportError("--url must look like http://HOST:PORT");
  if (!(a.interval > 0)) return ReportError("--interval must be > 0");
  Samples prev, now;
  std::string error;
  if (!Scrape(*url, &prev, &error)) return ReportError(fmt::format("{}: {}", a.url, error));
  const bool tty = isatty(STDOUT_FILENO);
  fmt::print("{:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7} {:>7}\n", "req/s", "gen tok/s", "ttft p50", "ttft p95",
             "e2e p50", "kv %", "running", "waiting");
  // One line from two scrapes: rates over dt seconds, latency quantiles of
  // the requests finished in between, gauges as of `now`.
  auto line = [&](const Samples& before, const Samples& after, double dt) {
    auto rate = [&](const std::string& p) { return (SumPrefix(after, p) - SumPrefix(before, p)) / dt; };
    return fmt::format(
        "{:8.2f} {:9.1f} {:>7}ms {:>7}ms {:>7}ms {:5.1f}% {:7.0f} {:7.0f}", rate("infera_request_success_total"),
        rate("infera_generation_tokens_total"), Ms(Quantile(before, after, "infera_time_to_first_token_seconds", 0.5)),
        Ms(Quantile(before, after, "infera_time_to_first_token_seconds", 0.95)),
        Ms(Quantile(before, after, "infera_e2e_request_latency_seconds", 0.5)),
        100 * SumPrefix(after, "infera_kv_cache_usage_ratio"), SumPrefix(after, "infera_num_requests_running"),
        SumPrefix(after, "infera_num_requests_waiting"));
  };
  // The first screen at once: averages since the server started (from an
  // empty scrape), so it shows real numbers before the first interval ends.
  const double now_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double started = SumPrefix(prev, "process_start_time_seconds");
  const double uptime = started > 0 ? std::max(1e-3, now_unix - started) : 0;
  if (uptime > 0) {
    const std::string first = line(Samples{}, prev, uptime) + "  (since start)";
    if (tty) {
      fmt::print("\r{}", first);
    } else {
      fmt::print("{}\n", first);
    }
    std::fflush(stdout);
  }
  auto t_prev = std::chrono::steady_clock::now();
  for (int i = 0; a.iterations == 0 || i < a.iterations; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval));
    if (!Scrape(*url, &now, &error)) return ReportError(fmt::format("{}: {}", a.url, error));
    const auto t_now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t_now - t_prev).count();
    const std::string text = line(prev, now, dt);
    if (tty) {
      fmt::print("\r{}{}", text, std::string(14, ' '));  // over the "(since start)" tail
    } else {
      fmt::print("{}\n", text);
    }
    std::fflush(stdout);
    prev.swap(now);
    t_prev = t_now;
  }
  if (tty) fmt::print("\n");
  return kExitOk;
}

}  // namespace

CommandFn RegisterTop(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<TopArgs>();
  app.add_option("--url", a->url, "server base URL (default http://127.0.0.1:8080)");
  app.add_option("--interval", a->interval, "seconds between refreshes (default 2)");
  app.add_option("--iterations", a->iterations, "refreshes before exiting (default 0: until Ctrl-C)");
  return [a]() { return Top(*a); };
}

}  // namespace infera::cli
