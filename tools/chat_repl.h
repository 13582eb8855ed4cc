// The interactive chat of `infera run` (no -p/-f on a terminal, or -i): a
// client of the serving engine, one request per turn; the engine's prefix
// cache (one-token blocks) keeps what the model already saw between turns.
#pragma once

#include <string>
#include <vector>

#include "infera/engine.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infera::cli {

struct ChatOptions {
  RequestParams params;       // per reply (max_tokens = -n)
  EngineOptions engine;       // threads, KV type, context (max_model_len)
  std::string chat_template;       // --chat-template ("" = the model's)
  std::string chat_template_file;  // --chat-template-file
  std::string system_prompt;
  ModelRunnerFactory make_runner;  // a split model's (empty: the model's decoder)
};

// Reads user turns from stdin until EOF (Ctrl-D). Returns the exit code.
int RunChatRepl(const Model& model, const Tokenizer& tok, const KernelTable& kernels, const ChatOptions& opts);

}  // namespace infera::cli
