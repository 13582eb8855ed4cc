// infera bench-serve: a load generator for a running OpenAI-compatible server
// (infera's or another), in the manner of vLLM's benchmark_serving: streaming
// completions of prompts of a given length, at fixed concurrency (closed
// loop) or with Poisson arrivals, for one or several concurrency levels.
// Prints throughput and TTFT / TPOT / ITL / end-to-end latency percentiles,
// writes the raw results as JSON and a plot (SVG) of latency and throughput
// against concurrency.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/output_file.h"
#include "server/http_client.h"
#include "tools/commands.h"

namespace infera::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string endpoint = "/v1/completions";
  std::string model, api_key, json_out, plot_out;
  std::vector<int> concurrency{1};
  int num_prompts = 32;
  double request_rate = 0;  // 0: send as fast as the concurrency allows
  int input_len = 64, output_len = 64;
  uint64_t seed = 0;
  bool no_stream = false;
  double timeout = 600;
  double max_error_rate = 0;  // failed / sent above this (or all failed): exit 1
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double start = 0;       // seconds since the level began
  double ttft = 0, e2e = 0;
  std::vector<double> itl;  // gaps between tokens after the first
  int64_t prompt_tokens = 0, output_tokens = 0;
};

using Target = server::HttpUrl;

// One streaming (or not) completion; fills r.
void RunRequest(const BenchServeArgs& a, const Target& t, const Json& body, Clock::time_point level_start,
                RequestResult* r) {
  const auto t0 = Clock::now();
  r->start = std::chrono::duration<double>(t0 - level_start).count();
  try {
    std::string pending;
    Clock::time_point last;
    bool first = true, done = false;
    auto on_event = [&](const std::string& data) {
      if (data == "[DONE]") {
        done = true;
        return;
      }
      Json j = Json::parse(data, nullptr, false);
      if (j.is_discarded()) return;
      if (j.contains("error")) {
        r->error = j["error"].value("message", "error");
        return;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        r->prompt_tokens = j["usage"].value("prompt_tokens", 0);
        r->output_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) return;
      const Json& c = j["choices"][0];
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        text = c["delta"]["content"].get<std::string>();
      }
      if (text.empty()) return;
      const auto now = Clock::now();
      if (first) {
        r->ttft = std::chrono::duration<double>(now - t0).count();
        first = false;
      } else {
        r->itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    };
    auto on_chunk = [&](std::string_view piece) {
      pending.append(piece);
      for (size_t pos; (pos = pending.find("\n\n")) != std::string::npos;) {
        const std::string event = pending.substr(0, pos);
        pending.erase(0, pos + 2);
        if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
      }
    };
    std::vector<std::pair<std::string, std::string>> headers;
    if (!a.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + a.api_key);
    auto res = server::HttpFetch(t, "POST", a.endpoint, DumpJson(body),
                                 std::chrono::milliseconds(static_cast<int64_t>(a.timeout * 1000)), headers, on_chunk);
    if (!res.ok()) {
      r->error = res.status().message();
    } else if (res->status != 200) {
      r->error = fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 200));
    } else if (a.no_stream) {
      Json j = Json::parse(res->body, nullptr, false);
      if (!j.is_discarded() && j.contains("usage")) {
        r->prompt_tokens = j["usage"].value("prompt_tokens", 0);
        r->output_tokens = j["usage"].value("completion_tokens", 0);
      }
      r->ok = r->output_tokens > 0;
    } else {
      r->ok = done && r->error.empty() && !first;
      if (r->ok && r->output_tokens == 0) r->output_tokens = static_cast<int64_t>(r->itl.size()) + 1;
      if (!done && r->error.empty()) r->error = "stream ended without [DONE]";
    }
  } catch (const std::exception& e) {
    r->error = e.what();
  }
  r->e2e = std::chrono::duration<double>(Clock::now() - t0).count();
  if (a.no_stream && r->ok) r->ttft = r->e2e;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Json Summary(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 50)}, {"p90", Percentile(v, 90)}, {"p99", Percentile(v, 99)},
          {"mean", v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size())}};
}

// One concurrency level: num_prompts requests, at most c in flight.
Json RunLevel(const BenchServeArgs& a, const Target& t, int c) {
  std::mt19937_64 rng(a.seed + static_cast<uint64_t>(c));
  std::uniform_int_distribution<int> tok(100, 999);
  std::exponential_distribution<double> gap(a.request_rate > 0 ? a.request_rate : 1.0);
  std::vector<Json> bodies;
  std::vector<double> arrival;
  double at = 0;
  for (int i = 0; i < a.num_prompts; ++i) {
    Json prompt = Json::array();
    for (int k = 0; k < a.input_len; ++k) prompt.push_back(tok(rng));
    Json b = {{"max_tokens", a.output_len}, {"temperature", 0}, {"ignore_eos", true}, {"stream", !a.no_stream}};
    if (!a.no_stream) b["stream_options"] = {{"include_usage", true}};
    if (!a.model.empty()) b["model"] = a.model;
    if (a.endpoint.find("chat") != std::string::npos) {
      // Chat endpoints take text: numbers as words give about input_len tokens.
      std::string text;
      for (const auto& id : prompt) text += std::to_string(id.get<int>()) + " ";
      b["messages"] = Json::array({{{"role", "user"}, {"content", text}}});
      b["max_completion_tokens"] = a.output_len;
    } else {
      b["prompt"] = prompt;
    }
    bodies.push_back(std::move(b));
    arrival.push_back(at);
    if (a.request_rate > 0) at += gap(rng);
  }
  std::vector<RequestResult> results(a.num_prompts);
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(c, a.num_prompts); ++w) {
    workers.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < a.num_prompts;) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrival[i])));
        RunRequest(a, t, bodies[i], start, &results[i]);
      }
    });
  }
  for (auto& w : workers) w.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t ok = 0, out_tokens = 0, in_tokens = 0;
  Json raw = Json::array();
  std::string first_error;
  for (const RequestResult& r : results) {
    raw.push_back({{"ok", r.ok}, {"error", r.error}, {"start", r.start}, {"ttft", r.ttft}, {"e2e", r.e2e},
                   {"itl", r.itl}, {"prompt_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens}});
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    out_tokens += r.output_tokens;
    in_tokens += r.prompt_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  Json level = {{"concurrency", c},
                {"completed", ok},
                {"failed", a.num_prompts - ok},
                {"duration_s", duration},
                {"request_throughput", ok / duration},
                {"output_throughput", out_tokens / duration},
                {"total_token_throughput", (in_tokens + out_tokens) / duration},
                {"ttft_s", Summary(ttft)},
                {"tpot_s", Summary(tpot)},
                {"itl_s", Summary(itl)},
                {"e2e_s", Summary(e2e)},
                {"requests", raw}};
  if (!first_error.empty()) level["first_error"] = first_error;
  return level;
}

// A line chart: x = concurrency (log scale), one polyline per series.
std::string Chart(const std::vector<Json>& levels, const std::string& title, const std::string& unit,
                  const std::vector<std::pair<std::string, std::function<double(const Json&)>>>& series, int x0) {
  const int w = 420, h = 300, left = 60, bottom = 40, top = 30;
  double ymax = 1e-9;
  for (const auto& [name, f] : series) {
    for (const Json& l : levels) ymax = std::max(ymax, f(l));
  }
  ymax *= 1.1;
  const double cmin = std::log2(std::max(1, levels.front()["concurrency"].get<int>()));
  const double cmax = std::max(cmin + 1, std::log2(levels.back()["concurrency"].get<int>()));
  auto X = [&](int c) { return x0 + left + (std::log2(c) - cmin) / (cmax - cmin) * (w - left - 20); };
  auto Y = [&](double v) { return top + (1 - v / ymax) * (h - top - bottom); };
  std::string s = fmt::format(R"(<text x="{}" y="18" font-size="14">{} ({})</text>)", x0 + left, title, unit);
  s += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="black"/>)", x0 + left, top, h - bottom);
  s += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="black"/>)", x0 + left, h - bottom, x0 + w - 10);
  for (int i = 0; i <= 4; ++i) {
    const double v = ymax * i / 4;
    s += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">{:.3g}</text>)", x0 + left - 4, Y(v) + 3, v);
  }
  for (const Json& l : levels) {
    const int c = l["concurrency"];
    s += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", X(c), h - bottom + 14, c);
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11">concurrent clients (log scale)</text>)", x0 + left + 90, h - 8);
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"};
  for (size_t k = 0; k < series.size(); ++k) {
    std::string pts;
    for (const Json& l : levels) pts += fmt::format("{:.1f},{:.1f} ", X(l["concurrency"]), Y(series[k].second(l)));
    s += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>)", kColors[k % 4], pts);
    for (const Json& l : levels) {
      s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", X(l["concurrency"]),
                       Y(series[k].second(l)), kColors[k % 4]);
    }
    s += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{}</text>)", x0 + left + 10,
                     top + 14 + 14 * static_cast<int>(k), kColors[k % 4], series[k].first);
  }
  return s;
}

int BenchServe(const BenchServeArgs& a) {
  auto url = server::ParseHttpUrl(a.url);
  if (!url.ok()) return ReportError("--url must look like http://HOST:PORT");
  const Target& t = *url;
  if (a.num_prompts < 1) return ReportError("--num-prompts must be at least 1");
  if (a.input_len < 1 || a.output_len < 1) return ReportError("--input-len and --output-len must be at least 1");
  for (int c : a.concurrency) {
    if (c < 1 || c > 4096) return ReportError("--concurrency values must be in 1..4096");
  }
  if (!(a.request_rate >= 0)) return ReportError("--request-rate must be >= 0");
  if (!(a.max_error_rate >= 0 && a.max_error_rate <= 1)) return ReportError("--max-error-rate must be in [0, 1]");
  if (!a.json_out.empty() && a.json_out == a.plot_out) return ReportError("--json and --plot name the same file");
  std::vector<Json> levels;
  fmt::print("{:>5} {:>5} {:>8} {:>9} | {:>21} | {:>21} | {:>21} | {:>21}\n", "conc", "ok", "req/s", "out tok/s",
             "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms", "ITL p50/p90/p99 ms", "E2E p50/p90/p99 s");
  for (int c : a.concurrency) {
    Json l = RunLevel(a, t, c);
    auto ms = [&](const char* k) {
      return fmt::format("{:6.1f} {:6.1f} {:7.1f}", l[k]["p50"].get<double>() * 1e3, l[k]["p90"].get<double>() * 1e3,
                         l[k]["p99"].get<double>() * 1e3);
    };
    fmt::print("{:>5} {:>5} {:>8.2f} {:>9.1f} | {} | {} | {} | {:6.2f} {:6.2f} {:7.2f}\n", c, l["completed"].get<int64_t>(),
               l["request_throughput"].get<double>(), l["output_throughput"].get<double>(), ms("ttft_s"), ms("tpot_s"),
               ms("itl_s"), l["e2e_s"]["p50"].get<double>(), l["e2e_s"]["p90"].get<double>(),
               l["e2e_s"]["p99"].get<double>());
    if (l.contains("first_error")) fmt::print("      first error: {}\n", l["first_error"].get<std::string>());
    std::fflush(stdout);
    levels.push_back(std::move(l));
  }
  if (!a.json_out.empty()) {
    Json out = {{"url", a.url}, {"endpoint", a.endpoint}, {"num_prompts", a.num_prompts},
                {"input_len", a.input_len}, {"output_len", a.output_len}, {"request_rate", a.request_rate},
                {"stream", !a.no_stream}, {"levels", levels}};
    if (Status st = WriteFileAtomically(a.json_out, DumpJson(out, 1) + "\n"); !st.ok()) return ReportError(st);
  }
  if (!a.plot_out.empty()) {
    auto p50 = [](const char* k) { return [k](const Json& l) { return l[k]["p50"].get<double>(); }; };
    std::string svg = R"(<svg xmlns="http://www.w3.org/2000/svg" width="860" height="300" font-family="sans-serif">)";
    svg += R"(<rect width="860" height="300" fill="white"/>)";
    svg += Chart(levels, "throughput", "per second",
                 {{"output tok/s", [](const Json& l) { return l["output_throughput"].get<double>(); }},
                  {"requests/s x100", [](const Json& l) { return 100 * l["request_throughput"].get<double>(); }}},
                 0);
    svg += Chart(levels, "latency p50", "seconds",
                 {{"TTFT", p50("ttft_s")}, {"E2E", p50("e2e_s")}, {"TPOT x10", [](const Json& l) {
                     return 10 * l["tpot_s"]["p50"].get<double>();
                   }}},
                 430);
    svg += "</svg>\n";
    if (Status st = WriteFileAtomically(a.plot_out, svg); !st.ok()) return ReportError(st);
  }
  // A benchmark whose requests failed measured something else: say so in the
  // exit status, so that scripts and CI notice.
  int64_t sent = 0, failed = 0;
  for (const Json& l : levels) {
    sent += a.num_prompts;
    failed += l["failed"].get<int64_t>();
  }
  const double rate = sent > 0 ? static_cast<double>(failed) / sent : 0.0;
  if (failed == sent || rate > a.max_error_rate) {
    std::fprintf(stderr, "infera: error: bench-serve: %lld of %lld requests failed (%.1f %%%s)\n",
                 static_cast<long long>(failed), static_cast<long long>(sent), 100 * rate,
                 failed == sent ? ", all of them" : fmt::format(", above --max-error-rate {}", a.max_error_rate).c_str());
    return kExitInternal;
  }
  return kExitOk;
}

}  // namespace

CommandFn RegisterBenchServe(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<BenchServeArgs>();
  app.add_option("--url", a->url, "server base URL (default http://127.0.0.1:8080)");
  app.add_option("--endpoint", a->endpoint, "/v1/completions (token-id prompts) or /v1/chat/completions");
  app.add_option("--model", a->model, "model name to send (default: none, the served model)");
  app.add_option("--api-key", a->api_key, "bearer token");
  app.add_option("--concurrency", a->concurrency, "clients in flight; a list sweeps levels (e.g. 1,4,16,64)")
      ->delimiter(',');
  app.add_option("--num-prompts", a->num_prompts, "requests per level (default 32)");
  app.add_option("--request-rate", a->request_rate, "Poisson arrivals per second (default 0: closed loop)");
  app.add_option("--input-len", a->input_len, "prompt tokens (default 64)");
  app.add_option("--output-len", a->output_len, "generated tokens, end-of-text ignored (default 64)");
  app.add_option("--seed", a->seed, "prompt RNG seed");
  app.add_flag("--no-stream", a->no_stream, "non-streaming requests (TTFT = end-to-end)");
  app.add_option("--timeout", a->timeout, "seconds per request (default 600)");
  app.add_option("--max-error-rate", a->max_error_rate,
                 "fraction of requests that may fail before the exit status is 1 (all failing always is)");
  app.add_option("--json", a->json_out, "write raw results and summaries as JSON");
  app.add_option("--plot", a->plot_out, "write an SVG: throughput and latency against concurrency");
  return [a]() { return BenchServe(*a); };
}

}  // namespace infera::cli
