#include "tools/chat_repl.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/logging.h"
#include "tools/cli_common.h"

namespace infera::cli {
namespace {

// Set by SIGINT; the only process-wide mutable state, as a signal handler
// can reach nothing else.
std::atomic<bool> g_interrupted{false};
void OnSigint(int) { g_interrupted.store(true); }

void InstallSigint() {
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

// Reads one line; false on EOF. An interrupted read returns an empty line.
bool ReadLine(std::string* line, bool* interrupted) {
  line->clear();
  *interrupted = false;
  char buf[4096];
  for (;;) {
    errno = 0;
    if (std::fgets(buf, sizeof(buf), stdin) == nullptr) {
      if (errno == EINTR || g_interrupted.exchange(false)) {
        std::clearerr(stdin);
        *interrupted = true;
        return true;
      }
      return !line->empty();
    }
    line->append(buf);
    if (!line->empty() && line->back() == '\n') {
      line->pop_back();
      return true;
    }
  }
}

}  // namespace

int RunChatRepl(const Model& model, const Tokenizer& tok, const KernelTable& kernels, const ChatOptions& opts) {
  auto resolved = ResolveChatTemplate(tok, opts.chat_template, opts.chat_template_file);
  if (!resolved.ok()) return ReportError(resolved.status());
  const ChatTemplate tmpl = *resolved;
  const bool plain = !tmpl.is_jinja() && tmpl.builtin() == ChatFormat::kPlain;
  // Built-in Mistral tokenizes turn by turn: never extended as text.
  const bool append_only_text = tmpl.is_jinja() || tmpl.builtin() != ChatFormat::kMistral;
  // One sequence; blocks of one token, so the prefix cache reuses exactly
  // the tokens already computed. A new conversation starts a new engine
  // (nothing of the old one is reused).
  EngineOptions eo = opts.engine;
  eo.max_num_seqs = 1;
  eo.kv_block_size = 1;
  eo.prefix_caching = true;
  std::unique_ptr<Engine> engine;
  Status engine_status;
  auto start = [&]() -> bool {
    auto e = Engine::Create(model, &tok, kernels, eo, opts.make_runner);
    engine_status = e.status();
    if (!e.ok()) return false;
    engine = std::move(e).value();
    return true;
  };
  if (!start()) return ReportError(engine_status);
  const int32_t n_ctx = eo.max_model_len;
  InstallSigint();
  std::fprintf(stderr, "chat (%s template): type a message; /help lists the commands, Ctrl-C stops a reply, Ctrl-D "
               "quits\n", tmpl.Name().c_str());

  std::vector<ChatMessage> messages;
  if (!opts.system_prompt.empty()) messages.push_back({"system", opts.system_prompt});
  std::string rendered;          // text the model has seen (string-template formats)
  std::vector<int32_t> history;  // tokens the model has seen
  RequestParams rp = opts.params;
  if (plain) rp.stop.push_back("\nUser:");
  int turn = 0;
  for (;;) {
    std::fputs("\n> ", stdout);
    std::fflush(stdout);
    std::string line;
    bool interrupted = false;
    if (!ReadLine(&line, &interrupted)) break;  // Ctrl-D
    if (interrupted || line.empty()) continue;
    if (line == "/help" || line == "/?") {
      std::fputs("commands:\n"
                 "  /system TEXT   set the system prompt and start a new conversation\n"
                 "  /reset         start a new conversation (the system prompt stays)\n"
                 "  /help, /?      this list\n"
                 "  /exit, /quit   quit (as Ctrl-D)\n"
                 "Ctrl-C stops a reply; anything else is sent to the model.\n", stderr);
      continue;
    }
    if (line == "/exit" || line == "/quit" || line == "/bye") break;
    if (line[0] == '/' && line.find(' ') == std::string::npos && line != "/reset" && line != "/system") {
      std::fprintf(stderr, "[unknown command %s: /help lists the commands]\n", line.c_str());
      continue;
    }
    if (line == "/reset" || line.rfind("/system", 0) == 0) {
      std::string system;
      for (const auto& m : messages) if (m.role == "system") system = m.content;
      if (line.rfind("/system", 0) == 0) system = line.size() > 8 ? line.substr(8) : "";
      messages.clear();
      if (!system.empty()) messages.push_back({"system", system});
      if (!start()) return ReportError(engine_status);
      history.clear();
      rendered.clear();
      std::fprintf(stderr, "[conversation cleared%s]\n", system.empty() ? "" : "; system prompt set");
      continue;
    }
    messages.push_back({"user", line});
    // Tokens to feed: the new text only, when the template is append-only;
    // otherwise the whole conversation minus the common cached prefix.
    // The tokens of the whole conversation: what the model saw plus the new
    // text only, when the template is append-only (so the cached tokens stay
    // exactly as they were); otherwise the conversation re-encoded.
    std::vector<int32_t> prompt;
    auto full_or = RenderChatText(tok, tmpl, messages, true);
    if (!full_or.ok()) {  // e.g. the template's raise_exception
      std::fprintf(stderr, "[%s]\n", std::string(full_or.status().message()).c_str());
      messages.pop_back();
      continue;
    }
    const std::string full = std::move(full_or).value();
    if (append_only_text && !history.empty() && full.compare(0, rendered.size(), rendered) == 0) {
      prompt = history;
      const auto more = tok.EncodeContinuation(std::string_view(full).substr(rendered.size()));
      prompt.insert(prompt.end(), more.begin(), more.end());
    } else {
      auto ids = EncodeChat(tok, tmpl, messages, true);
      if (!ids.ok()) {
        std::fprintf(stderr, "[%s]\n", std::string(ids.status().message()).c_str());
        messages.pop_back();
        continue;
      }
      prompt = std::move(ids).value();
    }
    const int32_t room = n_ctx - static_cast<int32_t>(prompt.size());
    if (room <= 0) {
      std::fprintf(stderr, "[the context is full (%d tokens): /reset to start over]\n", n_ctx);
      messages.pop_back();
      continue;
    }
    RequestParams turn_params = rp;
    if (turn_params.max_tokens > room) turn_params.max_tokens = room;
    g_interrupted.store(false);
    auto id = engine->Add(prompt, turn_params);
    if (!id.ok()) {
      ReportError(id.status());
      messages.pop_back();
      continue;
    }
    std::string reply;
    std::vector<int32_t> generated;
    RequestOutput last;
    bool cancelled = false;
    while (engine->HasWork()) {
      if (g_interrupted.load() && !cancelled) {
        engine->Cancel(*id);  // Ctrl-C: this reply ends at the next step
        cancelled = true;
      }
      for (RequestOutput& o : engine->Step()) {
        reply += o.text;
        generated.insert(generated.end(), o.tokens.begin(), o.tokens.end());
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
        if (o.finished) last = std::move(o);
      }
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (last.finish_reason == FinishReason::kError) {
      ReportError(last.error);
      messages.pop_back();
      if (!start()) return ReportError(engine_status);
      history.clear();
      rendered.clear();
      continue;
    }
    ++turn;
    messages.push_back({"assistant", reply});
    rendered = full + reply;
    history = prompt;
    history.insert(history.end(), generated.begin(), generated.end());
    const double gen_s = std::max(1e-9, last.e2e_seconds - last.queue_seconds - last.ttft_seconds);
    std::fprintf(stderr, "[turn %d: %d new prompt tokens processed, %d reused from the cache; %d generated, %.1f tok/s%s]\n",
                 turn, last.prompt_tokens - last.cached_tokens, last.cached_tokens, last.completion_tokens,
                 last.completion_tokens / gen_s, last.finish_reason == FinishReason::kCancelled ? "; stopped" : "");
    std::fflush(stderr);
  }
  std::fputc('\n', stdout);
  return kExitOk;
}

}  // namespace infera::cli
