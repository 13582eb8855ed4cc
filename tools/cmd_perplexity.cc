// infera perplexity: llama-perplexity's method, so numbers compare with
// llama.cpp's. The tokenized text (BOS first) is cut into non-overlapping
// chunks of --ctx tokens; each chunk is evaluated from an empty cache with
// BOS as its first token, and only the second half of each chunk is scored.
//
// --kl-divergence-base FILE saves the log-probabilities of every scored
// position (f32); a later run with --kl-divergence compares against them:
// mean KL(base || this model) and top-1 agreement.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file_util.h"
#include "base/json.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "infera/engine.h"
#include "tools/commands.h"
#include "tools/parallel_session.h"

namespace infera::cli {
namespace {

struct PplArgs {
  std::string model, file, kld_base;
  int32_t ctx = 0;  // 0: 512, or the trained context when that is shorter
  int32_t chunks = -1;
  int32_t batch = 512;
  int threads = 0;
  bool kld = false;
  bool json = false;
  std::string kv_type = "f32";
  ParallelFlags parallel;
  // llama-perplexity's task scores, run as `infera eval`: the first N tasks
  // (llama.cpp picks N at random; its --hellaswag-tasks default is 400).
  bool hellaswag = false, winogrande = false, multiple_choice = false;
  int hellaswag_tasks = 400, winogrande_tasks = 0, multiple_choice_tasks = 0;
};

constexpr char kKldMagic[8] = {'I', 'N', 'F', 'K', 'L', 'D', '1', '\0'};

struct KldHeader {
  char magic[8];
  uint32_t n_vocab, ctx, n_chunks, scored_per_chunk;
  uint64_t tokens_hash;  // FNV-1a of the evaluated token ids
};

uint64_t HashTokens(const std::vector<int32_t>& t, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// Log-softmax of one row into out (double accumulation).
void LogSoftmax(const float* logits, int32_t n, std::vector<float>* out) {
  float mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  out->resize(n);
  for (int32_t i = 0; i < n; ++i) (*out)[i] = static_cast<float>(logits[i] - lse);
}

int Evaluate(const PplArgs& a, const Model& m, const Tokenizer& tok, const std::string& text_in,
             const KernelTable& kernels, ParallelSession& ps);

int Perplexity(const PplArgs& args, const RuntimeOptions& rt_in) {
  auto session = ParallelSession::Start(args.parallel);
  if (!session.ok()) return ReportError(session.status());
  ParallelSession& ps = **session;
  PplArgs a = args;
  if (a.threads < 0) return ReportError("--threads must be >= 0");
  const RuntimeOptions rt = ps.RankRuntime(rt_in, a.threads);
  a.threads = rt.threads;
  if (ps.rank() != 0) return ps.RunWorker(ModelPathOrDefault(a.model), rt);
  if (a.file.empty()) return ReportError("--file is required");
  if (a.hellaswag + a.winogrande + a.multiple_choice > 1) {
    return ReportError("--hellaswag, --winogrande and --multiple-choice: give one");
  }
  if (a.hellaswag || a.winogrande || a.multiple_choice) {
    if (a.kld || !a.kld_base.empty() || ps.split()) {
      return ReportError(
          "a task score (--hellaswag, --winogrande, --multiple-choice) does not combine with "
          "--kl-divergence or --tp / --pp");
    }
    const int limit = a.hellaswag ? a.hellaswag_tasks : a.winogrande ? a.winogrande_tasks : a.multiple_choice_tasks;
    if (limit < 0) return ReportError("the task count must be >= 0 (0: every task)");
    return RunTaskEval(a.model, a.file,
                       a.hellaswag    ? "hellaswag"
                       : a.winogrande ? "winogrande"
                                      : "multiple-choice",
                       limit, a.threads, a.json, rt);
  }
  if (a.ctx != 0 && a.ctx < 4) return ReportError("--ctx must be >= 4");
  if (a.chunks == 0 || a.chunks < -1) return ReportError("--chunks must be > 0");
  if (a.batch <= 0 || a.threads < 0) return ReportError("--batch-size must be > 0 and --threads >= 0");
  if (a.kld && a.kld_base.empty()) return ReportError("--kl-divergence needs --kl-divergence-base FILE");
  if (!a.kld && !a.kld_base.empty()) {  // the base file is written: never over the model or the text
    if (Status st = CheckOutputNotInput(a.kld_base, {ModelPathOrDefault(a.model), a.file}); !st.ok()) return ReportError(st);
  }
  auto text = ReadTextArg(a.file);
  if (!text.ok()) return ReportError(text.status());
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, "", true, ForKernels(ps.load_options(), *kernels));
  if (Status st = ps.Ready(ModelPathOrDefault(a.model), lm.status(), *kernels, a.threads); !st.ok()) {
    return ReportError(st);
  }
  const Model& m = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  const int32_t n_train = m.config.n_ctx_train;
  if (n_train > 0 && a.ctx > n_train) {
    return ReportError(fmt::format("--ctx {} is beyond the model's trained context of {} tokens (positions past it "
                                   "were never trained; perplexity there is meaningless)", a.ctx, n_train));
  }
  PplArgs resolved = a;  // with the context resolved
  if (resolved.ctx == 0) resolved.ctx = n_train > 0 ? std::min(512, n_train) : 512;
  return Evaluate(resolved, m, tok, *text, *kernels, ps);
}

int Evaluate(const PplArgs& a, const Model& m, const Tokenizer& tok, const std::string& text_in,
             const KernelTable& kernels, ParallelSession& ps) {
  const std::string* text = &text_in;
  const int32_t V = m.config.n_vocab;
  std::vector<int32_t> tokens = tok.Encode(*text, /*add_special=*/true, /*parse_special=*/false);
  const int32_t n_max = static_cast<int32_t>(tokens.size() / a.ctx);
  if (n_max == 0) {
    return ReportError(fmt::format("{} has {} tokens; --ctx {} needs at least that many", a.file, tokens.size(), a.ctx));
  }
  const int32_t n_chunks = a.chunks > 0 ? std::min(a.chunks, n_max) : n_max;
  const int32_t first = a.ctx / 2;
  const int32_t scored = a.ctx - 1 - first;

  // KL divergence base: write (no --kl-divergence) or read (with it).
  std::unique_ptr<OutputFile> base_file;  // renamed over --kl-divergence-base at the end
  FILE* base_out = nullptr;
  std::ifstream base_in;
  if (!a.kld_base.empty()) {
    KldHeader h{};
    if (a.kld) {
      base_in.open(a.kld_base, std::ios::binary);
      if (!base_in || !base_in.read(reinterpret_cast<char*>(&h), sizeof(h)) || std::memcmp(h.magic, kKldMagic, 8) != 0) {
        return ReportError(a.kld_base + ": not an infera KL-divergence base file");
      }
      if (h.n_vocab != static_cast<uint32_t>(V) || h.ctx != static_cast<uint32_t>(a.ctx) ||
          h.n_chunks < static_cast<uint32_t>(n_chunks) ||
          h.tokens_hash != HashTokens(tokens, static_cast<size_t>(h.n_chunks) * a.ctx)) {
        return ReportError(fmt::format("{}: made with another vocabulary, text or --ctx (base: vocab {}, ctx {}, {} chunks)",
                                       a.kld_base, h.n_vocab, h.ctx, h.n_chunks));
      }
    } else {
      std::memcpy(h.magic, kKldMagic, 8);
      h.n_vocab = V;
      h.ctx = a.ctx;
      h.n_chunks = n_chunks;
      h.scored_per_chunk = scored;
      h.tokens_hash = HashTokens(tokens, static_cast<size_t>(n_chunks) * a.ctx);
      auto f = OutputFile::Create(a.kld_base);
      if (!f.ok()) return ReportError(f.status());
      base_file = std::move(f).value();
      base_out = base_file->stream();
      std::fwrite(&h, sizeof(h), 1, base_out);
    }
  }

  // One chunk at a time through the serving engine: a prompt-only request
  // that returns the logits of positions [first, ctx).
  EngineOptions eo;
  eo.threads = ResolveThreads(a.threads);
  eo.max_num_seqs = 1;
  eo.max_batched_tokens = std::min(a.batch, a.ctx);
  eo.max_model_len = a.ctx;
  eo.prefix_caching = false;
  eo.kv_cache_type = a.kv_type;
  auto engine = Engine::Create(m, &tok, kernels, eo, ps.RunnerFactory(m, kernels, eo.max_model_len));
  if (!engine.ok()) return ReportError(engine.status());
  RequestParams rp;
  rp.max_tokens = 0;
  rp.prompt_logits_from = first;
  double nll = 0, nll2 = 0, kld_sum = 0, kld_sum2 = 0;
  int64_t count = 0, top1 = 0;
  std::vector<float> lp, lp_base(V);
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(c) * a.ctx,
                               tokens.begin() + static_cast<int64_t>(c + 1) * a.ctx);
    const std::vector<int32_t> original = chunk;
    if (tok.vocab().bos >= 0) chunk[0] = tok.vocab().bos;
    auto res = RunRequest(**engine, chunk, rp);
    if (!res.ok()) return ReportError(res.status());
    const std::vector<float>& logits = res->prompt_logits;
    CHECK(logits.size() >= static_cast<size_t>(scored) * V);
    for (int32_t j = 0; j < scored; ++j) {
      const float* row = logits.data() + static_cast<size_t>(j) * V;
      LogSoftmax(row, V, &lp);
      const double x = -lp[original[first + j + 1]];
      nll += x;
      nll2 += x * x;
      ++count;
      if (base_out != nullptr) std::fwrite(lp.data(), sizeof(float), V, base_out);
      if (base_in.is_open()) {
        if (!base_in.read(reinterpret_cast<char*>(lp_base.data()), sizeof(float) * V)) {
          return ReportError(a.kld_base + ": truncated");
        }
        double kl = 0;
        int32_t arg_b = 0, arg_c = 0;
        for (int32_t i = 0; i < V; ++i) {
          kl += std::exp(static_cast<double>(lp_base[i])) * (lp_base[i] - lp[i]);
          if (lp_base[i] > lp_base[arg_b]) arg_b = i;
          if (lp[i] > lp[arg_c]) arg_c = i;
        }
        kld_sum += kl;
        kld_sum2 += kl * kl;
        top1 += arg_b == arg_c;
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int w = 30, done = (c + 1) * w / n_chunks;
    std::fprintf(stderr, "\r[%s%s] %d/%d chunks, ppl %.4f, %.1f s", std::string(done, '#').c_str(),
                 std::string(w - done, '-').c_str(), c + 1, n_chunks, std::exp(nll / count), secs);
    std::fflush(stderr);
  }
  std::fputc('\n', stderr);
  if (base_file) {
    if (Status st = base_file->Commit(); !st.ok()) return ReportError(st);
  }
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  const double ppl = std::exp(mean);
  const double ppl_err = var > 0 && count > 1 ? ppl * std::sqrt(var / (count - 1)) : 0.0;
  nlohmann::json j = {{"ppl", ppl}, {"ppl_stderr", ppl_err}, {"tokens", count}, {"chunks", n_chunks}, {"ctx", a.ctx}};
  std::string extra;
  if (base_in.is_open()) {
    const double kmean = kld_sum / count;
    const double kvar = kld_sum2 / count - kmean * kmean;
    const double kerr = kvar > 0 && count > 1 ? std::sqrt(kvar / (count - 1)) : 0.0;
    j["kld"] = kmean;
    j["kld_stderr"] = kerr;
    j["top1_agreement"] = static_cast<double>(top1) / count;
    extra = fmt::format("\nKL divergence = {:.6f} +/- {:.6f}, top-1 agreement = {:.3f} %", kmean, kerr,
                        100.0 * top1 / count);
  }
  if (a.json) {
    std::printf("%s\n", DumpJson(j).c_str());
  } else {
    std::printf("ppl = %.4f +/- %.4f (%lld tokens scored, %d chunks of %d)%s\n", ppl, ppl_err,
                static_cast<long long>(count), n_chunks, a.ctx, extra.c_str());
  }
  return kExitOk;
}

}  // namespace

CommandFn RegisterPerplexity(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<PplArgs>();
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("-f,--file", a->file, "text to evaluate (- reads stdin)")->required();
  app.add_option("-c,--ctx,--ctx-size", a->ctx, "tokens per chunk (0: 512, or the trained context if shorter)");
  app.add_option("--chunks", a->chunks, "evaluate only the first N chunks");
  app.add_option("-b,--batch-size", a->batch, "tokens per forward pass");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use; more is capped)");
  app.add_option("--kl-divergence-base", a->kld_base, "file of base log-probabilities (written, or read with --kl-divergence)");
  app.add_flag("--kl-divergence", a->kld, "compare against --kl-divergence-base: mean KL divergence and top-1 agreement");
  app.add_flag("--json", a->json, "print one JSON object");
  app.add_option("--kv-cache-type", a->kv_type, "f32 (default), bf16 (bf16 attention products) or q8: int8 K/V with a scale per token and KV head");
  app.add_flag("--hellaswag", a->hellaswag, "score HellaSwag tasks in -f (llama.cpp's 6-line format), as infera eval");
  app.add_option("--hellaswag-tasks", a->hellaswag_tasks, "the first N tasks (0: all)");
  app.add_flag("--winogrande", a->winogrande, "score WinoGrande tasks in -f (llama.cpp's CSV), as infera eval");
  app.add_option("--winogrande-tasks", a->winogrande_tasks, "the first N tasks (0: all)");
  app.add_flag("--multiple-choice", a->multiple_choice,
               "score llama.cpp's binary multiple-choice tasks in -f, as infera eval");
  app.add_option("--multiple-choice-tasks", a->multiple_choice_tasks, "the first N tasks (0: all)");
  AddParallelFlags(app, &a->parallel);
  return [a, &rt]() { return Perplexity(*a, rt); };
}

}  // namespace infera::cli
