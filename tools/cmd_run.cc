// infera run: stream a continuation of a prompt to stdout.
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include <fmt/format.h>

#include "attention/kv_storage.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "infera/engine.h"
#include "sampling/sampler.h"
#include "tools/chat_repl.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/grammar_flags.h"
#include "tools/parallel_session.h"

namespace infera::cli {
namespace {

struct RunArgs {
  std::string model, tokenizer, prompt, prompt_file;
  bool prompt_set = false;
  int32_t n_predict = -1;
  int32_t ctx = 0;
  int32_t batch = 512;
  int threads = 0;
  bool ignore_eos = false;
  bool no_display_prompt = false;
  bool no_special = false;
  bool interactive = false;
  bool escape = false;  // -e: process \n, \t, ... in the prompt and stop strings
  std::string chat_template, chat_template_file, system_prompt;
  std::vector<std::string> stop;
  SamplingParams sampling;
  int64_t seed = -1;
  std::string kv_cache_type = "f32";
  bool context_shift = false;
  int32_t context_keep = 4;
  ParallelFlags parallel;
  // The engine options the speculative decoding flags set (the rest are
  // defaults); the engine's options start from these.
  EngineOptions engine;
  std::string draft_model;
  GrammarFlags grammar;
  LoraFlags lora;
};

// llama-cli's -e: \n \r \t \' \" \\ and \xHH in the prompt (and stop
// strings) become the characters they name; any other backslash stays.
std::string ProcessEscapes(const std::string& s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[i + 1];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case 'x':
        if (i + 3 < s.size() && hex(s[i + 2]) >= 0 && hex(s[i + 3]) >= 0) {
          out += static_cast<char>(hex(s[i + 2]) * 16 + hex(s[i + 3]));
          i += 2;
          break;
        }
        out += "\\x";
        break;
      default:
        out += '\\';
        out += c;
    }
    ++i;
  }
  return out;
}

int Run(const RunArgs& a_in, const RuntimeOptions& rt_in) {
  RunArgs a = a_in;
  if (a.escape) {
    a.prompt = ProcessEscapes(a.prompt);
    for (std::string& stop : a.stop) stop = ProcessEscapes(stop);
  }
  if (a.n_predict < -1) return ReportError("-n must be >= 0 (or -1 for no limit)");
  if (a.ctx < 0) return ReportError("--ctx-size must be >= 0");
  if (a.batch <= 0) return ReportError("--batch-size must be > 0");
  if (a.threads < 0) return ReportError("--threads must be >= 0");
  if (a.seed < -1) return ReportError("--seed must be >= 0");
  KvType kv_type;
  if (!ParseKvType(a.kv_cache_type, &kv_type)) return ReportError("--kv-cache-type must be f32, bf16 or q8");
  if (a.context_keep < 0) return ReportError("--context-keep must be >= 0");
  if (Status st = CheckModelFreeEngineOptions(a.engine); !st.ok()) return ReportError(st);
  SamplingParams sp = a.sampling;
  if (a.seed >= 0) {
    sp.seed = static_cast<uint64_t>(a.seed);
    sp.has_seed = true;
  }
  if (Status st = ValidateSamplingParams(sp); !st.ok()) return ReportError(st);
  auto grammar = GrammarFromFlags(a.grammar);
  if (!grammar.ok()) return ReportError(grammar.status());
  const bool chat = a.interactive || (!a.prompt_set && a.prompt_file.empty() && isatty(STDIN_FILENO));
  if (!chat && !a.prompt_set && a.prompt_file.empty()) {
    return ReportError("no prompt: pass -p PROMPT or -f FILE (or -i for a chat)");
  }
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    auto text = ReadTextArg(a.prompt_file);
    if (!text.ok()) return ReportError(text.status());
    prompt = a.escape ? ProcessEscapes(*text) : *text;
  }

  auto session = ParallelSession::Start(a.parallel);
  if (!session.ok()) return ReportError(session.status());
  ParallelSession& ps = **session;
  const RuntimeOptions rt = ps.RankRuntime(rt_in, a.threads);
  const int threads = rt.threads;
  if (ps.rank() != 0) return ps.RunWorker(ModelPathOrDefault(a.model), rt);
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, a.tokenizer, true, ForKernels(ps.load_options(), *kernels));
  if (Status st = ps.Ready(ModelPathOrDefault(a.model), lm.status(), *kernels, threads); !st.ok()) {
    return ReportError(st);
  }
  const Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  if (model.config.n_ctx_train > 0 && a.ctx > model.config.n_ctx_train) {
    return ReportError(fmt::format("-c {} is beyond the model's trained context of {} tokens", a.ctx,
                                   model.config.n_ctx_train));
  }
  const int32_t n_ctx = ChooseContextSize(model.config, a.ctx);

  LOG_INFO("threads: {}", threads);
  // KV bytes for n tokens of this model, and whole MiB holding them.
  auto kv_bytes = [&](int64_t n) {
    return KvStorage::BytesFor(model.config.KvHeadsPerLayer(), n, model.config.head_dim, kv_type);
  };
  auto kv_mb = [&](int64_t n) { return static_cast<int64_t>((kv_bytes(n) + (1 << 20) - 1) >> 20); };
  // Always shown (stderr): the context actually in force; a too-small
  // default would otherwise be invisible.
  auto print_context = [&] {
    std::fprintf(stderr, "context: %d tokens (model trained on %d%s), KV cache %.1f MiB\n", n_ctx, model.config.n_ctx_train,
                 a.ctx > 0 ? ", set by -c" : n_ctx < model.config.n_ctx_train ? ", capped to fit in memory" : "",
                 kv_bytes(n_ctx) / 1048576.0);
  };
  if (chat && a.context_shift) return ReportError("--context-shift applies to -p/-f generation, not to the chat");
  if (chat) {
    print_context();
    ChatOptions co;
    co.engine = a.engine;
    co.params.sampling = sp;
    co.params.max_tokens = a.n_predict;
    co.params.ignore_eos = a.ignore_eos;
    co.params.stop = a.stop;
    co.params.grammar = *grammar;
    co.engine.threads = threads;
    co.engine.max_model_len = n_ctx;
    co.engine.max_batched_tokens = a.batch;
    co.engine.kv_cache_type = a.kv_cache_type;
    co.engine.kv_cache_mb = kv_mb(n_ctx + 1);  // one-token blocks
    auto chat_draft = LoadDraftModel(a.draft_model, ForKernels({}, *kernels), &co.engine);
    if (!chat_draft.ok()) return ReportError(chat_draft.status());
    auto chat_lora = LoadLoraAdapters(a.lora, model, &co.engine);
    if (!chat_lora.ok()) return ReportError(chat_lora.status());
    co.chat_template = a.chat_template;
    co.chat_template_file = a.chat_template_file;
    co.system_prompt = a.system_prompt;
    co.make_runner = ps.RunnerFactory(model, *kernels, n_ctx);
    return RunChatRepl(model, tok, *kernels, co);
  }

  std::vector<int32_t> ids = tok.Encode(prompt, /*add_special=*/true, /*parse_special=*/!a.no_special);
  if (ids.empty()) return ReportError("the prompt encodes to no tokens and the model adds no BOS");
  if (static_cast<int32_t>(ids.size()) >= n_ctx) {
    return ReportError(fmt::format("the prompt has {} tokens but the context holds {}, which leaves no room to "
                                   "generate; raise -c or shorten the prompt", ids.size(), n_ctx));
  }
  print_context();
  // The generation is a single-sequence client of the serving engine, so it
  // runs the same scheduling, paged KV cache, sampling and stop handling as
  // `serve` and `generate`.
  EngineOptions eo = a.engine;
  eo.threads = threads;
  eo.max_model_len = n_ctx;
  eo.max_num_seqs = 1;
  eo.max_batched_tokens = a.batch;
  eo.prefix_caching = false;
  eo.kv_cache_type = a.kv_cache_type;
  eo.context_shift = a.context_shift;
  eo.context_keep = a.context_keep;
  eo.kv_cache_mb = kv_mb(n_ctx + eo.kv_block_size);
  auto draft = LoadDraftModel(a.draft_model, ForKernels({}, *kernels), &eo);
  if (!draft.ok()) return ReportError(draft.status());
  auto lora = LoadLoraAdapters(a.lora, model, &eo);
  if (!lora.ok()) return ReportError(lora.status());
  auto engine = Engine::Create(model, &tok, *kernels, eo, ps.RunnerFactory(model, *kernels, n_ctx));
  if (!engine.ok()) return ReportError(engine.status());
  // The prompt is echoed only once the engine exists: an option the engine
  // refuses leaves stdout empty (one error line on stderr, exit 2).
  const bool echo = !a.no_display_prompt && !prompt.empty();
  if (echo) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  if (a.n_predict == 0) {  // nothing to generate
    std::fputc('\n', stdout);
    std::fprintf(stderr, "\nfinish: length | prompt: %zu tokens, not run | generation: 0 tokens\n", ids.size());
    return kExitOk;
  }
  RequestParams rp;
  rp.sampling = sp;
  // -n past the context: generate to the context end (reported as such).
  const int32_t room = n_ctx - static_cast<int32_t>(ids.size());
  rp.max_tokens = a.n_predict < 0 ? -1 : a.context_shift ? a.n_predict : std::min(a.n_predict, room);
  rp.stop = a.stop;
  rp.ignore_eos = a.ignore_eos;
  rp.grammar = *grammar;
  rp.text_starts_output = !echo;
  auto id = (*engine)->Add(ids, rp);
  if (!id.ok()) return ReportError(id.status());
  // A failed write to stdout (a full disk, a closed pipe) ends the generation:
  // nobody receives the text.
  bool write_failed = std::ferror(stdout) != 0;
  if (write_failed) (*engine)->Cancel(*id);
  RequestOutput last;
  while ((*engine)->HasWork()) {
    for (RequestOutput& o : (*engine)->Step()) {
      if (!o.text.empty() && !write_failed &&
          (std::fwrite(o.text.data(), 1, o.text.size(), stdout) != o.text.size() || std::fflush(stdout) != 0)) {
        write_failed = true;
        (*engine)->Cancel(*id);
      }
      if (o.finished) last = std::move(o);
    }
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);  // a write error is reported (exit 1) when the command returns
  if (last.finish_reason == FinishReason::kError) return ReportError(last.error);
  if (write_failed) return kExitOk;
  FinishReason finish = last.finish_reason;
  // Ended by the context rather than by -n: say so, as llama.cpp does.
  if (finish == FinishReason::kLength && (a.n_predict < 0 || last.completion_tokens < a.n_predict)) {
    finish = FinishReason::kContextFull;
  }
  const double prompt_s = last.ttft_seconds, gen_s = std::max(0.0, last.e2e_seconds - last.queue_seconds - prompt_s);
  std::fprintf(stderr, "\nfinish: %s | prompt: %d tokens in %.1f ms (%.1f tok/s) | generation: %d tokens in %.1f ms (%.1f tok/s)\n",
               FinishReasonName(finish), last.prompt_tokens, prompt_s * 1e3,
               last.prompt_tokens / std::max(prompt_s, 1e-9), last.completion_tokens, gen_s * 1e3,
               last.completion_tokens / std::max(gen_s, 1e-9));
  if (eo.spec != "none") {
    const EngineStats st = (*engine)->Stats();
    std::fprintf(stderr, "speculative (%s): %llu drafted, %llu accepted (%.1f%%), %llu steps, an extra token costs %.2f of a step\n", eo.spec.c_str(),
                 static_cast<unsigned long long>(st.spec_draft_tokens),
                 static_cast<unsigned long long>(st.spec_accepted_tokens),
                 100.0 * st.spec_accepted_tokens / std::max<uint64_t>(1, st.spec_draft_tokens),
                 static_cast<unsigned long long>(st.steps), st.spec_token_cost_ratio);
  }
  return kExitOk;
}

}  // namespace

CommandFn RegisterRun(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("-m,--model", a->model, "GGUF file, Hugging Face folder or llama2.c .bin (default: the bundled model)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file (llama2.c tokenizer .bin or a GGUF)");
  auto* p = app.add_option("-p,--prompt", a->prompt, "prompt text (\"\" generates from BOS alone)");
  app.add_option("-f,--file", a->prompt_file, "read the prompt from a file (- reads stdin)");
  app.add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until EOS or the context is full)");
  app.add_option("-c,--ctx-size", a->ctx, "context size in tokens (0: the model's, capped to fit in memory)");
  app.add_option("-b,--batch-size", a->batch, "prompt tokens per forward pass");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use; more is capped)");
  app.add_option("--temp", a->sampling.temperature, "temperature (0: greedy)");
  app.add_option("--top-k", a->sampling.top_k, "top-k (0: off)");
  app.add_option("--top-p", a->sampling.top_p, "top-p in (0, 1]");
  app.add_option("--min-p", a->sampling.min_p, "min-p in [0, 1]");
  app.add_option("--repeat-penalty", a->sampling.repetition_penalty, "repetition penalty (1: off)");
  app.add_option("--presence-penalty", a->sampling.presence_penalty, "presence penalty");
  app.add_option("--frequency-penalty", a->sampling.frequency_penalty, "frequency penalty");
  app.add_option("--repeat-last-n", a->sampling.penalty_last_n, "tokens the penalties look at (-1: all)");
  app.add_option("-s,--seed", a->seed, "RNG seed (default: random)");
  app.add_option("--stop", a->stop, "stop string (repeatable)");
  app.add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  app.add_flag("--no-display-prompt", a->no_display_prompt, "do not echo the prompt");
  app.add_flag(
      "-e,--escape", a->escape,
      "process escapes (\\n, \\r, \\t, \\', \\\", \\\\, \\xHH) in the prompt (-p or -f) and --stop strings, as "
      "llama-cli does by default");
  app.add_flag("--no-special", a->no_special, "treat special-token text in the prompt as plain text");
  app.add_flag("-i,--interactive", a->interactive, "chat (the default without -p/-f on a terminal)");
  app.add_option("--chat-template", a->chat_template, kChatTemplateHelp);
  app.add_option("--chat-template-file", a->chat_template_file, "a Jinja chat template to use instead of the model's");
  app.add_option("--system", a->system_prompt, "system prompt for the chat");
  app.add_option("--kv-cache-type", a->kv_cache_type, "f32 (default), bf16 (half the memory; bf16 attention products) or q8 (int8, a scale per token and KV head)");
  app.add_flag("--context-shift", a->context_shift,
               "at the context end keep the first --context-keep tokens and the newer half of the rest, and go on");
  app.add_option("--context-keep", a->context_keep, "tokens kept at the start by --context-shift");
  AddSpecFlags(app, &a->engine, &a->draft_model);
  AddLoraFlags(app, &a->lora, /*with_modules=*/false);
  AddGrammarFlags(app, &a->grammar);
  AddParallelFlags(app, &a->parallel);
  return [a, p, &rt]() {
    a->prompt_set = p->count() > 0;
    return Run(*a, rt);
  };
}

}  // namespace infera::cli
