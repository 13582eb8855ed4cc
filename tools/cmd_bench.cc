// infera bench: prompt-processing (ppN) and generation (tgN) speed, like
// llama-bench: each test starts from an empty KV cache (or one holding
// --n-depth tokens); a warm-up run first. Every test is one request through
// the serving engine: ppN times a prompt-only request of N tokens, tgN the N
// single-token decode steps after its prompt.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attention/kv_storage.h"
#include "base/cpu_features.h"
#include "base/json.h"
#include "base/logging.h"
#include "infera/engine.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/parallel_session.h"

namespace infera::cli {
namespace {

struct BenchArgs {
  std::string model;
  // Lists, as llama-bench's: every value is a test (-d: every test at each).
  std::vector<int32_t> n_prompt{512};
  std::vector<int32_t> n_gen{128};
  std::vector<int32_t> depth{0};
  std::vector<std::string> pg;  // "P,N": a prompt of P tokens, then N generated (t/s of both)
  int threads = 0;
  int reps = 5;
  int32_t batch = 512;
  bool json = false;
  std::string output = "md";  // md, csv, json, jsonl
  std::string parallel;  // "1,8,32": batched-bench mode through the engine
  EngineFlags engine;
  ParallelFlags split;   // --tp / --pp
};

struct Stat { double mean, sd; };
Stat MeanSd(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  m /= v.size();
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(s / (v.size() - 1)) : 0.0};
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto p = s.find(" (");
  return p == std::string::npos ? s : s.substr(0, p);
}

// For each N: N sequences of p random prompt tokens, then n generated tokens
// each, through the serving engine together (llama-batched-bench's test).
int BenchParallel(const BenchArgs& a, int32_t n_prompt, int32_t n_gen, const RuntimeOptions& rt, ParallelSession& ps) {
  std::vector<int32_t> ns;
  for (size_t pos = 0; pos < a.parallel.size();) {
    size_t end = a.parallel.find(',', pos);
    if (end == std::string::npos) end = a.parallel.size();
    const std::string item = a.parallel.substr(pos, end - pos);
    char* rest = nullptr;
    const long v = std::strtol(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || v < 1 || v > 4096) return ReportError("--parallel takes a list like 1,8,32");
    ns.push_back(static_cast<int32_t>(v));
    pos = end + 1;
  }
  if (n_prompt < 1 || n_gen < 1) return ReportError("--parallel needs -p and -n of at least 1");
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, "", false, ForKernels(ps.load_options(), *kernels));
  if (Status st = ps.Ready(ModelPathOrDefault(a.model), lm.status(), *kernels, a.threads); !st.ok()) {
    return ReportError(st);
  }
  const Model& m = *lm->model;
  const int32_t n_train = m.config.n_ctx_train;
  if (n_train > 0 && static_cast<int64_t>(n_prompt) + n_gen > n_train) {
    return ReportError(
        fmt::format("-p {} + -n {} is beyond the model's trained context of {} tokens", n_prompt, n_gen, n_train));
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, m.config.n_vocab - 1);
  nlohmann::json out = nlohmann::json::array();
  if (!a.json) {
    std::printf("| %8s | %6s | %6s | %10s | %10s | %10s | %8s |\n", "parallel", "pp", "tg", "pp t/s", "tg t/s",
                "total t/s", "time s");
    std::printf("|----------|--------|--------|------------|------------|------------|----------|\n");
  }
  auto run = [&](int32_t n_par, int32_t p, int32_t n, bool report) -> Status {
    EngineFlags ef = a.engine;
    if (std::string e = ResolveEngineFlags(&ef, a.threads); !e.empty()) return InvalidArgument(e);
    EngineOptions o = ef.opts;
    o.max_num_seqs = std::max(o.max_num_seqs, n_par);
    const int32_t need = n_par * (p + n + o.kv_block_size);
    if (o.kv_cache_mb == 0) {
      o.kv_cache_mb = static_cast<int64_t>(KvStorage::BytesFor(m.config.KvHeadsPerLayer(), need, m.config.head_dim) >> 20) + 1;
    }
    if (o.max_model_len == 0) o.max_model_len = p + n;
    ASSIGN_OR_RETURN(auto engine, Engine::Create(m, nullptr, *kernels, o, ps.RunnerFactory(m, *kernels, o.max_model_len)));
    RequestParams rp;
    rp.max_tokens = n;
    rp.ignore_eos = true;
    rp.sampling.temperature = 0;
    for (int32_t i = 0; i < n_par; ++i) {
      std::vector<int32_t> prompt(p);
      for (auto& t : prompt) t = tok(rng);
      ASSIGN_OR_RETURN(uint64_t id, engine->Add(std::move(prompt), rp));
      (void)id;
    }
    int32_t first_tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto t_pp = t0;
    while (engine->HasWork()) {
      for (const RequestOutput& r : engine->Step()) {
        if (r.finish_reason == FinishReason::kError) return Internal(r.error);
        if (r.completion_tokens == 1 && !r.tokens.empty() && ++first_tokens == n_par) t_pp = std::chrono::steady_clock::now();
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    const double s_pp = std::chrono::duration<double>(t_pp - t0).count();
    const double s_tg = std::chrono::duration<double>(t1 - t_pp).count();
    const double s_all = std::chrono::duration<double>(t1 - t0).count();
    const double pp = static_cast<double>(n_par) * p / s_pp;
    const double tg = n > 1 ? static_cast<double>(n_par) * (n - 1) / s_tg : 0.0;
    const double total = static_cast<double>(n_par) * (p + n) / s_all;
    if (!report) return Status::Ok();
    out.push_back({{"parallel", n_par}, {"pp", p}, {"tg", n}, {"pp_tokens_per_second", pp},
                   {"tg_tokens_per_second", tg}, {"total_tokens_per_second", total}, {"seconds", s_all}});
    if (!a.json) {
      std::printf("| %8d | %6d | %6d | %10.2f | %10.2f | %10.2f | %8.2f |\n", n_par, p, n, pp, tg, total, s_all);
      std::fflush(stdout);
    }
    return Status::Ok();
  };
  if (Status st = run(1, 8, 4, false); !st.ok()) return ReportError(st);  // warm-up
  for (int32_t n_par : ns) {
    if (Status st = run(n_par, n_prompt, n_gen, true); !st.ok()) return ReportError(st);
  }
  if (a.json) std::printf("%s\n", DumpJson(out, 2).c_str());
  return kExitOk;
}

// A test of the non-parallel bench: ppP (P prompt tokens; t/s of the prompt),
// tgN (N decode steps after the prompt), or ppP+tgN (both, timed together;
// t/s of all P + N tokens), each after `depth` tokens already in the cache.
struct BenchTest {
  int32_t prompt = 0;
  int32_t gen = 0;
  std::string Name(int32_t depth) const {
    const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
    if (prompt > 0 && gen > 0) return fmt::format("pp{}+tg{}{}", prompt, gen, at);
    return prompt > 0 ? fmt::format("pp{}{}", prompt, at) : fmt::format("tg{}{}", gen, at);
  }
};

// The KV cache type in llama.cpp's spelling (its type_k / type_v fields).
const char* LlamaCppKvType(const std::string& t) { return t == "q8" ? "q8_0" : t.c_str(); }

// One row of the csv / jsonl / json outputs: llama-bench's fields (so scripts
// written for its output read these too) and infera's own.
constexpr const char* kCsvFields[] = {"model_filename", "model_type", "model_size", "cpu_info",     "n_threads",
                                      "n_batch",        "type_k",     "type_v",     "n_prompt",     "n_gen",
                                      "n_depth",        "test_time",  "avg_ns",     "stddev_ns",    "avg_ts",
                                      "stddev_ts",      "test",       "kernels",    "matmul_dtype", "attn_dtype"};

std::string CsvCell(const nlohmann::json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : DumpJson(v);
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string NowIso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int Bench(const BenchArgs& args, const RuntimeOptions& rt_in) {
  const LoraFlags& lf = args.engine.lora;
  if (!lf.lora.empty() || !lf.lora_scaled.empty() || !lf.lora_modules.empty()) {
    return ReportError("bench measures the model alone: --lora / --lora-scaled / --lora-modules are not taken");
  }
  auto session = ParallelSession::Start(args.split);
  if (!session.ok()) return ReportError(session.status());
  ParallelSession& ps = **session;
  BenchArgs a = args;
  if (a.threads < 0) return ReportError("--threads must be >= 0");
  if (a.json) a.output = "json";
  if (a.output != "md" && a.output != "csv" && a.output != "json" && a.output != "jsonl") {
    return ReportError(fmt::format("-o {}: the outputs are md (a table), csv, json and jsonl", a.output));
  }
  a.json = a.output == "json";
  const RuntimeOptions rt_split = ps.RankRuntime(rt_in, a.threads);
  a.threads = rt_split.threads;
  if (ps.rank() != 0) return ps.RunWorker(ModelPathOrDefault(a.model), rt_split);
  for (const auto* list : {&a.n_prompt, &a.n_gen}) {
    for (int32_t v : *list) {
      if (v < 0) return ReportError("-p and -n must be >= 0");
    }
  }
  for (int32_t d : a.depth) {
    if (d < 0) return ReportError("--n-depth must be >= 0");
  }
  std::vector<BenchTest> pg;
  for (const std::string& item : a.pg) {
    int p = 0, n = 0, used = 0;
    if (std::sscanf(item.c_str(), "%d,%d%n", &p, &n, &used) != 2 || used != static_cast<int>(item.size()) || p < 1 ||
        n < 1) {
      return ReportError(fmt::format("--pg {}: expected PROMPT,GEN with both at least 1, e.g. --pg 512,128", item));
    }
    pg.push_back({p, n});
  }
  if (!a.parallel.empty()) {
    if (a.n_prompt.size() != 1 || a.n_gen.size() != 1 || a.depth != std::vector<int32_t>{0} || !pg.empty()) {
      return ReportError("--parallel takes one -p and one -n value, and no -d or --pg");
    }
    if (a.output != "md" && a.output != "json") return ReportError("--parallel prints md or json");
    return BenchParallel(a, a.n_prompt[0], a.n_gen[0], rt_split, ps);
  }
  if (a.reps <= 0) return ReportError("-r must be > 0");
  if (a.batch <= 0) return ReportError("--batch-size must be > 0");
  // The tests, in llama-bench's order: every -p, every -n, every -pg.
  std::vector<BenchTest> tests;
  for (int32_t p : a.n_prompt) {
    if (p > 0) tests.push_back({p, 0});
  }
  for (int32_t n : a.n_gen) {
    if (n > 0) tests.push_back({0, n});
  }
  tests.insert(tests.end(), pg.begin(), pg.end());
  RuntimeOptions rt = rt_in;
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, "", false, ForKernels(ps.load_options(), *kernels));
  if (Status st = ps.Ready(ModelPathOrDefault(a.model), lm.status(), *kernels, a.threads); !st.ok()) {
    return ReportError(st);
  }
  const Model& m = *lm->model;
  const int32_t n_train = m.config.n_ctx_train;
  // A test's context: max(depth, 1) tokens, its prompt, then its generated
  // tokens plus one (tgN's N decode steps follow the token its prompt gives).
  auto n_ctx_for = [&](int32_t depth) {
    int64_t most = 0;
    for (const BenchTest& t : tests) most = std::max<int64_t>(most, static_cast<int64_t>(t.prompt) + t.gen);
    return std::max(depth, 1) + most + 1;
  };
  for (int32_t depth : a.depth) {
    if (n_train > 0 && n_ctx_for(depth) > n_train) {
      return ReportError(
          fmt::format("--n-depth {} + the longest test ({} tokens) + 1 is beyond the model's trained "
                      "context of {} tokens",
                      depth, n_ctx_for(depth) - std::max(depth, 1) - 1, n_train));
    }
  }
  // The engine flags as given (KV cache type and size, speculative decoding,
  // ...), one sequence at a time.
  EngineFlags ef = a.engine;
  if (std::string e = ResolveEngineFlags(&ef, a.threads); !e.empty()) return ReportError(e);
  const EngineOptions base = ef.opts;

  // The products the kernels compute in and the KV cache's type (all f32
  // unless --matmul-dtype / --attn-dtype / --kv-cache-type say otherwise).
  const std::string numerics = fmt::format("{}/{}/{}", kernels->matmul_bf16 ? "bf16" : "f32",
                                           kernels->attn_bf16 ? "bf16" : "f32", base.kv_cache_type);
  const std::string cpu = CpuModelName();
  nlohmann::json out = nlohmann::json::array();
  if (a.output == "md") {
    std::printf("| %-24s | %-6s | %7s | %6s | %-14s | %-14s | %16s |\n", "model", "type", "threads", "isa",
                "matmul/attn/kv", "test", "t/s");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(26, '-').c_str(), std::string(8, '-').c_str(),
                std::string(9, '-').c_str(), std::string(8, '-').c_str(), std::string(16, '-').c_str(),
                std::string(16, '-').c_str(), std::string(18, '-').c_str());
  } else if (a.output == "csv") {
    std::string header;
    for (const char* f : kCsvFields) header += (header.empty() ? "" : ",") + std::string(f);
    std::printf("%s\n", header.c_str());
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, m.config.n_vocab - 1);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = tok(rng);
    return t;
  };
  for (int32_t depth : a.depth) {
    EngineOptions eo = base;
    eo.max_num_seqs = 1;
    eo.max_batched_tokens = a.batch;
    eo.max_model_len = static_cast<int32_t>(n_ctx_for(depth));
    // KV blocks as served (16 slots by default: the attention kernel reads
    // whole 16-slot groups in place), or of 1 slot when --n-depth is not a
    // multiple of that: the prefix cache reuses whole blocks and must reuse
    // exactly the depth.
    if (depth % eo.kv_block_size != 0) eo.kv_block_size = 1;
    // ppN @ dD (and ppP+tgN): the depth is computed untimed, then reused.
    eo.prefix_caching =
        depth > 0 && std::any_of(tests.begin(), tests.end(), [](const BenchTest& t) { return t.prompt > 0; });
    auto created = Engine::Create(m, nullptr, *kernels, eo, ps.RunnerFactory(m, *kernels, eo.max_model_len));
    if (!created.ok()) return ReportError(created.status());
    Engine& engine = **created;
    // The seconds of one run of test t.
    auto time_once = [&](const BenchTest& t) -> StatusOr<double> {
      std::vector<int32_t> ctx = random_tokens(std::max(depth, t.prompt > 0 ? 0 : 1));
      RequestParams rp;
      rp.sampling.temperature = 0;
      rp.ignore_eos = true;
      if (t.prompt > 0) {
        if (depth > 0) {  // untimed: the depth into the prefix cache
          rp.max_tokens = 0;
          rp.prompt_logits_from = depth - 1;
          RETURN_IF_ERROR(RunRequest(engine, ctx, rp).status());
        }
        const std::vector<int32_t> more = random_tokens(t.prompt);
        ctx.insert(ctx.end(), more.begin(), more.end());
        rp.max_tokens = t.gen;
        rp.prompt_logits_from = -1;
        if (t.gen == 0)
          rp.prompt_logits_from = static_cast<int32_t>(ctx.size()) - 1;  // the last row only, as llama-bench
        const uint64_t computed_before = engine.Stats().prefill_tokens_computed;
        const auto t0 = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(RequestResult r, RunRequest(engine, ctx, rp));
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (engine.Stats().prefill_tokens_computed - computed_before != static_cast<uint64_t>(t.prompt)) {
          return Internal("bench: the depth was not served from the prefix cache");
        }
        if (r.tokens.size() != static_cast<size_t>(t.gen)) {
          return Internal(fmt::format("bench: {} tokens generated, {} expected", r.tokens.size(), t.gen));
        }
        return s;
      }
      rp.max_tokens = t.gen + 1;
      RETURN_IF_ERROR(engine.Add(ctx, rp).status());
      int32_t produced = 0;
      std::chrono::steady_clock::time_point t0;
      while (engine.HasWork()) {
        for (const RequestOutput& o : engine.Step()) {
          if (o.finish_reason == FinishReason::kError) return Internal(o.error);
          if (produced == 0 && !o.tokens.empty()) t0 = std::chrono::steady_clock::now();  // the prompt is done
          produced += static_cast<int32_t>(o.tokens.size());
        }
      }
      if (produced != t.gen + 1) {
        return Internal(fmt::format("bench: {} tokens generated, {} expected", produced, t.gen + 1));
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto run_test = [&](const BenchTest& t) -> Status {
      const std::string name = t.Name(depth);
      const int32_t tokens = t.prompt + t.gen;
      std::vector<double> tps, ns;
      CommStats comm0;
      std::vector<RankStats> ranks0;
      double timed = 0;
      for (int r = -1; r < a.reps; ++r) {  // r = -1: warm-up
        if (r == 0) {
          comm0 = ps.Stats();
          ranks0 = ps.RankStatsSnapshot();
        }
        StatusOr<double> s = time_once(t);
        RETURN_IF_ERROR(s.status());
        if (r >= 0) {
          tps.push_back(tokens / *s);
          ns.push_back(*s * 1e9);
          timed += *s;
        }
      }
      const Stat st = MeanSd(tps), st_ns = MeanSd(ns);
      nlohmann::json row = {{"test", name},
                            {"tokens_per_second", st.mean},
                            {"stddev", st.sd},
                            {"threads", eo.threads},
                            {"model_type", Upper(m.weight_type_summary)},
                            {"repetitions", a.reps},
                            {"kernels", CpuIsaName(kernels->isa)},
                            {"matmul_dtype", kernels->matmul_bf16 ? "bf16" : "f32"},
                            {"attn_dtype", kernels->attn_bf16 ? "bf16" : "f32"},
                            {"kv_cache_type", eo.kv_cache_type},
                            // llama-bench's names.
                            {"model_filename", m.path},
                            {"model_size", m.weights->total_bytes},
                            {"cpu_info", cpu},
                            {"n_threads", eo.threads},
                            {"n_batch", a.batch},
                            {"type_k", LlamaCppKvType(eo.kv_cache_type)},
                            {"type_v", LlamaCppKvType(eo.kv_cache_type)},
                            {"n_prompt", t.prompt},
                            {"n_gen", t.gen},
                            {"n_depth", depth},
                            {"test_time", NowIso8601()},
                            {"avg_ns", static_cast<uint64_t>(st_ns.mean)},
                            {"stddev_ns", static_cast<uint64_t>(st_ns.sd)},
                            {"avg_ts", st.mean},
                            {"stddev_ts", st.sd},
                            {"samples_ns", nlohmann::json::array()},
                            {"samples_ts", tps}};
      for (double x : ns) row["samples_ns"].push_back(static_cast<uint64_t>(x));
      if (ps.split()) {
        // Rank 0's time inside communication (waiting for the other ranks
        // included) and its bytes, per token of the timed runs.
        const CommStats c = ps.Stats();
        const double n_tokens = double(tokens) * a.reps;
        const double comm_s = c.seconds - comm0.seconds;
        const double bytes = double(c.bytes_sent - comm0.bytes_sent + c.bytes_received - comm0.bytes_received);
        row["tp"] = a.split.tp;
        row["pp"] = a.split.pp;
        row["comm_ms_per_token"] = 1e3 * comm_s / n_tokens;
        row["comm_share"] = timed > 0 ? comm_s / timed : 0.0;
        row["comm_bytes_per_token"] = bytes / n_tokens;
        // Each rank's share of its step time spent waiting on / talking to the
        // others: for pipeline stages, the bubble.
        const std::vector<RankStats> ranks1 = ps.RankStatsSnapshot();
        std::string shares;
        nlohmann::json per_rank = nlohmann::json::array();
        for (size_t i = 0; i < ranks1.size() && i < ranks0.size(); ++i) {
          const double step = ranks1[i].step_seconds - ranks0[i].step_seconds;
          const double idle = step > 0 ? (ranks1[i].comm_seconds - ranks0[i].comm_seconds) / step : 0.0;
          per_rank.push_back(idle);
          shares += fmt::format("{}r{} {:.0f} %", i ? ", " : "", i, 100 * idle);
        }
        row["rank_comm_share"] = per_rank;
        std::fprintf(stderr,
                     "bench: %s tp %d pp %d: rank 0 in communication %.3f ms per token (%.1f %% of the time), "
                     "%.1f KiB sent + received per token; share of each rank's step time in communication "
                     "(the bubble, for stages): %s\n",
                     name.c_str(), a.split.tp, a.split.pp, 1e3 * comm_s / n_tokens,
                     timed > 0 ? 100.0 * comm_s / timed : 0.0, bytes / n_tokens / 1024.0, shares.c_str());
      }
      if (a.output == "md") {
        std::printf("| %-24s | %-6s | %7d | %6s | %-14s | %-14s | %16s |\n", m.config.name.substr(0, 24).c_str(),
                    Upper(m.weight_type_summary).c_str(), eo.threads, CpuIsaName(kernels->isa), numerics.c_str(),
                    name.c_str(), fmt::format("{:.2f} ± {:.2f}", st.mean, st.sd).c_str());
      } else if (a.output == "csv") {
        std::string line;
        for (const char* f : kCsvFields) line += (line.empty() ? "" : ",") + CsvCell(row[f]);
        std::printf("%s\n", line.c_str());
      } else if (a.output == "jsonl") {
        std::printf("%s\n", DumpJson(row).c_str());
      }
      std::fflush(stdout);
      out.push_back(std::move(row));
      return Status::Ok();
    };
    for (const BenchTest& t : tests) {
      if (Status st = run_test(t); !st.ok()) return ReportError(st);
    }
  }
  if (a.output == "json") std::printf("%s\n", DumpJson(out, 2).c_str());
  return kExitOk;
}

}  // namespace

CommandFn RegisterBench(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("-p,--n-prompt", a->n_prompt, "prompt tokens, a test each (a list: 128,512; 0: none)")->delimiter(',');
  app.add_option("-n,--n-gen", a->n_gen, "generated tokens, a test each (a list: 32,128; 0: none)")->delimiter(',');
  app.add_option("--pg", a->pg,
                 "PROMPT,GEN: a prompt then GEN generated tokens, timed together (repeatable; llama-bench's -pg)");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use; more is capped)");
  app.add_option("-r,--repetitions", a->reps, "repetitions per test");
  app.add_option("-b,--batch-size", a->batch, "prompt tokens per forward pass");
  app.add_option("-d,--n-depth", a->depth,
                 "tokens already in the KV cache when each test starts (a list: every test at each)")
      ->delimiter(',');
  app.add_option("-o,--output", a->output,
                 "md (a table), csv, json (one array) or jsonl (a line per test, as it ends)");
  app.add_flag("--json", a->json, "-o json");
  app.add_option("--parallel", a->parallel,
                 "N1,N2,...: for each N, N sequences of -p prompt and -n generated tokens through the serving engine "
                 "together (llama-batched-bench)");
  AddEngineFlags(app, &a->engine);
  AddParallelFlags(app, &a->split);
  return [a, &rt]() { return Bench(*a, rt); };
}

}  // namespace infera::cli
