// infera eval -m MODEL -f TASKS [--format F]: multiple-choice accuracy by the
// log-likelihood of each choice's continuation (the sum, and the mean per
// token: "acc" and "acc_norm"), or LAMBADA-style last-word accuracy, scored
// through the serving engine: many choices run in one batch, and a task's
// later choices are added once its first one has put the shared context in
// the prefix cache, so the context is computed once per task.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "infera/engine.h"
#include "tools/commands.h"
#include "tools/eval_tasks.h"

namespace infera::cli {
namespace {

struct EvalArgs {
  std::string model;
  std::string file;
  std::string format;
  int limit = 0;
  int threads = 0;
  int parallel = 64;
  bool json = false;
};

// One choice's request and score.
struct ChoiceRun {
  std::vector<int32_t> tokens;  // BOS + prefix + continuation
  int32_t first = 0;            // index of the first scored token (>= 1)
  double logprob = 0;           // sum over scored tokens
  bool all_argmax = true;       // every scored token was the model's top choice
  bool done = false;
};

// Length of the common prefix of a and b.
size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Adds logits rows [rows, n_vocab] for positions pos, pos+1, ... to c.
void Score(const float* rows, int32_t n_rows, int32_t pos, int32_t n_vocab, ChoiceRun* c) {
  for (int32_t r = 0; r < n_rows; ++r) {
    const int32_t p = pos + r;  // predicts token p + 1
    if (p < c->first - 1 || p + 1 >= static_cast<int32_t>(c->tokens.size())) continue;
    const float* row = rows + static_cast<size_t>(r) * n_vocab;
    const float mx = *std::max_element(row, row + n_vocab);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
    const int32_t want = c->tokens[p + 1];
    c->logprob += row[want] - mx - std::log(sum);
    if (row[want] < mx) c->all_argmax = false;
  }
}

int RunEval(const EvalArgs& a, const RuntimeOptions& rt) {
  if (a.limit < 0 || a.parallel < 1) return ReportError("--limit must be >= 0 and --parallel >= 1");
  auto text = ReadTextArg(a.file);
  if (!text.ok()) return ReportError(text.status());
  auto format = ParseEvalFormat(a.format, a.file, *text);
  if (!format.ok()) return ReportError(format.status());
  auto tasks = ParseEvalTasks(*format, *text, a.file);
  if (!tasks.ok()) return ReportError(tasks.status());
  if (a.limit > 0 && static_cast<size_t>(a.limit) < tasks->size()) tasks->resize(static_cast<size_t>(a.limit));

  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, "", true, ForKernels({}, *kernels));
  if (!lm.ok()) return ReportError(lm.status());
  const Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  EngineOptions eo;
  eo.threads = ResolveThreads(a.threads);
  eo.max_num_seqs = std::min(a.parallel, 256);
  eo.prefix_caching = true;
  auto engine = Engine::Create(model, &tok, *kernels, eo);
  if (!engine.ok()) return ReportError(engine.status());
  const int32_t n_vocab = (*engine)->n_vocab(), max_len = (*engine)->max_model_len();

  // Tokenize: the scored tokens start where the choice's tokens leave its
  // prefix's (a merge across the boundary is scored with the continuation).
  std::vector<std::vector<ChoiceRun>> runs(tasks->size());
  size_t too_long = 0;
  std::vector<bool> skip(tasks->size(), false);
  for (size_t t = 0; t < tasks->size(); ++t) {
    for (const EvalChoice& ch : (*tasks)[t].choices) {
      ChoiceRun c;
      c.tokens = tok.Encode(ch.prefix + ch.continuation, /*add_special=*/true, /*parse_special=*/false);
      const auto prefix = tok.Encode(ch.prefix, true, false);
      c.first = static_cast<int32_t>(std::min(CommonPrefix(prefix, c.tokens), c.tokens.size() - 1));
      c.first = std::max<int32_t>(c.first, 1);
      if (static_cast<int32_t>(c.tokens.size()) > max_len || c.tokens.size() < 2) skip[t] = true;
      runs[t].push_back(std::move(c));
    }
    too_long += skip[t];
  }

  // Pending requests: a task's first choice, then (once it is done) the rest.
  std::deque<std::pair<size_t, size_t>> ready;
  for (size_t t = 0; t < runs.size(); ++t) {
    if (!skip[t]) ready.emplace_back(t, 0);
  }
  std::map<uint64_t, std::pair<size_t, size_t>> inflight;
  int64_t prompt_tokens = 0, cached_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t finished_tasks = 0;
  std::vector<size_t> left(runs.size());
  for (size_t t = 0; t < runs.size(); ++t) left[t] = runs[t].size();
  while (!ready.empty() || !inflight.empty()) {
    while (!ready.empty() && static_cast<int>(inflight.size()) < a.parallel) {
      const auto [t, c] = ready.front();
      ready.pop_front();
      RequestParams rp;
      rp.max_tokens = 0;
      rp.prompt_logits_from = runs[t][c].first - 1;
      auto id = (*engine)->Add(runs[t][c].tokens, rp);
      if (!id.ok()) return ReportError(id.status());
      inflight[*id] = {t, c};
    }
    for (const RequestOutput& out : (*engine)->Step()) {
      auto it = inflight.find(out.id);
      if (it == inflight.end()) continue;
      const auto [t, c] = it->second;
      ChoiceRun& run = runs[t][c];
      if (!out.prompt_logits.empty()) {
        Score(out.prompt_logits.data(), static_cast<int32_t>(out.prompt_logits.size() / n_vocab),
              out.prompt_logits_pos, n_vocab, &run);
      }
      if (!out.finished) continue;
      if (out.finish_reason == FinishReason::kError) return ReportError("scoring failed: " + out.error);
      prompt_tokens += out.prompt_tokens;
      cached_tokens += out.cached_tokens;
      run.done = true;
      inflight.erase(it);
      if (c == 0) {
        for (size_t k = 1; k < runs[t].size(); ++k) ready.emplace_front(t, k);
      }
      if (--left[t] == 0 && ++finished_tasks % 100 == 0) {
        std::fprintf(stderr, "eval: %zu/%zu tasks\n", finished_tasks, runs.size() - too_long);
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Accuracy by the summed log-likelihood and by its mean per scored token.
  int64_t n = 0, right = 0, right_norm = 0;
  double target_logprob = 0, target_tokens = 0;
  for (size_t t = 0; t < runs.size(); ++t) {
    if (skip[t]) continue;
    ++n;
    const auto& rs = runs[t];
    const std::vector<int>& correct = (*tasks)[t].correct;
    auto right_choice = [&](size_t k) { return std::find(correct.begin(), correct.end(), static_cast<int>(k)) != correct.end(); };
    if (rs.size() == 1) {  // lambada: the target must be the model's greedy continuation
      right += rs[0].all_argmax;
      right_norm += rs[0].all_argmax;
      target_logprob += rs[0].logprob;
      target_tokens += static_cast<double>(rs[0].tokens.size() - rs[0].first);
      continue;
    }
    size_t best = 0, best_norm = 0;
    auto mean = [&](size_t k) { return rs[k].logprob / static_cast<double>(rs[k].tokens.size() - rs[k].first); };
    for (size_t k = 1; k < rs.size(); ++k) {
      if (rs[k].logprob > rs[best].logprob) best = k;
      if (mean(k) > mean(best_norm)) best_norm = k;
    }
    right += right_choice(best);
    right_norm += right_choice(best_norm);
  }
  if (n == 0) return ReportError(fmt::format("{}: every task is longer than the context ({} tokens)", a.file, max_len));
  const double acc = static_cast<double>(right) / n, acc_norm = static_cast<double>(right_norm) / n;
  auto stderr_of = [n](double p) { return std::sqrt(p * (1 - p) / static_cast<double>(n)); };
  const bool lambada = *format == EvalFormat::kLambada;
  nlohmann::json j = {{"format", EvalFormatName(*format)}, {"tasks", n}, {"skipped_too_long", too_long},
                      {"acc", acc}, {"acc_stderr", stderr_of(acc)}, {"seconds", secs},
                      {"prompt_tokens", prompt_tokens}, {"cached_tokens", cached_tokens}};
  if (lambada) {
    j["target_ppl"] = std::exp(-target_logprob / std::max(1.0, target_tokens));
  } else {
    j["acc_norm"] = acc_norm;
    j["acc_norm_stderr"] = stderr_of(acc_norm);
  }
  if (a.json) {
    std::printf("%s\n", DumpJson(j).c_str());
  } else if (lambada) {
    std::printf("%s: %lld passages, last-word accuracy %.2f %% ± %.2f, target ppl %.3f (%.1f s)\n", a.file.c_str(),
                static_cast<long long>(n), 100 * acc, 100 * stderr_of(acc), j["target_ppl"].get<double>(), secs);
  } else {
    std::printf("%s (%s): %lld tasks, acc %.2f %% ± %.2f, acc_norm %.2f %% ± %.2f (%.1f s, %.0f %% of prompt "
                "tokens from the prefix cache)\n", a.file.c_str(), EvalFormatName(*format), static_cast<long long>(n),
                100 * acc, 100 * stderr_of(acc), 100 * acc_norm, 100 * stderr_of(acc_norm), secs,
                prompt_tokens ? 100.0 * cached_tokens / prompt_tokens : 0.0);
  }
  if (too_long) std::fprintf(stderr, "eval: %zu tasks longer than the context (%d tokens) skipped\n", too_long, max_len);
  return kExitOk;
}

}  // namespace

int RunTaskEval(const std::string& model, const std::string& file, const std::string& format, int limit, int threads,
                bool json, const RuntimeOptions& rt) {
  EvalArgs a;
  a.model = model;
  a.file = file;
  a.format = format;
  a.limit = limit;
  a.threads = threads;
  a.json = json;
  return RunEval(a, rt);
}

CommandFn RegisterEval(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<EvalArgs>();
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("-f,--file", a->file, "task file (- reads stdin)")->required();
  app.add_option("--format", a->format,
                 "hellaswag (llama.cpp's 6-line text), winogrande (llama.cpp's CSV), jsonl ({ctx, endings, label}) "
                 "lambada (one passage per line; its last word is the target) or multiple-choice (llama.cpp's binary "
                 "--multiple-choice files); default: by extension / content");
  app.add_option("--limit", a->limit, "score only the first N tasks");
  app.add_option("--parallel", a->parallel, "choices scored at once (default 64)");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use)");
  app.add_flag("--json", a->json, "print one JSON object");
  return [a, &rt]() { return RunEval(*a, rt); };
}

}  // namespace infera::cli
