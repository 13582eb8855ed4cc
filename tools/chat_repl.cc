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

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

int RunChatRepl(Generator& gen, const Tokenizer& tok, const ChatOptions& opts) {
  auto resolved = ResolveChatFormat(tok, opts.chat_template);
  if (!resolved.ok()) return ReportError(resolved.status());
  const ChatFormat fmt = *resolved;
  InstallSigint();
  std::fprintf(stderr, "chat (%s format): type a message; /help lists the commands, Ctrl-C stops a reply, Ctrl-D "
               "quits\n", ChatFormatName(fmt));

  std::vector<ChatMessage> messages;
  if (!opts.system_prompt.empty()) messages.push_back({"system", opts.system_prompt});
  std::string rendered;  // text now in the KV cache (string-template formats)
  GenerateOptions go = opts.gen;
  go.cancel = &g_interrupted;
  if (fmt == ChatFormat::kPlain) go.stop.push_back("\nUser:");
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
      gen.Reset();
      rendered.clear();
      std::fprintf(stderr, "[conversation cleared%s]\n", system.empty() ? "" : "; system prompt set");
      continue;
    }
    messages.push_back({"user", line});
    // Tokens to feed: the new text only, when the template is append-only;
    // otherwise the whole conversation minus the common cached prefix.
    std::vector<int32_t> feed;
    const std::string full = RenderChat(fmt, messages, true);
    size_t reused = 0;
    if (fmt != ChatFormat::kMistral && gen.n_past() > 0 && full.compare(0, rendered.size(), rendered) == 0) {
      reused = static_cast<size_t>(gen.n_past());
      feed = tok.EncodeContinuation(std::string_view(full).substr(rendered.size()));
    } else {
      const std::vector<int32_t> all = EncodeChat(tok, fmt, messages, true);
      reused = CommonPrefix(all, gen.history());
      if (reused == all.size() && reused > 0) --reused;  // recompute the last token for fresh logits
      gen.Truncate(static_cast<int32_t>(reused));
      feed.assign(all.begin() + reused, all.end());
    }
    if (gen.n_past() + static_cast<int32_t>(feed.size()) >= gen.n_ctx()) {
      std::fprintf(stderr, "[the context is full (%d tokens): /reset to start over]\n", gen.n_ctx());
      messages.pop_back();
      continue;
    }
    g_interrupted.store(false);
    std::string reply;
    auto res = gen.Generate(feed, go, [&](const std::string& text) {
      reply += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }, /*echo_started=*/true);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!res.ok()) {
      ReportError(res.status());
      messages.pop_back();
      gen.Reset();
      rendered.clear();
      continue;
    }
    ++turn;
    messages.push_back({"assistant", reply});
    rendered = full + reply;
    std::fprintf(stderr, "[turn %d: %d new prompt tokens processed, %zu reused from the cache; %zu generated, %.1f tok/s%s]\n",
                 turn, res->prompt_tokens, reused, res->tokens.size(),
                 res->tokens.size() / std::max(res->gen_seconds, 1e-9),
                 res->finish == FinishReason::kCancelled ? "; stopped" : "");
    std::fflush(stderr);
  }
  std::fputc('\n', stdout);
  return kExitOk;
}

}  // namespace infera::cli
