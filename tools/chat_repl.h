// The interactive chat of `infera run` (no -p/-f on a terminal, or -i).
#pragma once

#include "engine/generator.h"
#include "tokenizer/chat_template.h"

namespace infera::cli {

struct ChatOptions {
  GenerateOptions gen;        // per reply (max_tokens = -n)
  std::string chat_template;  // "" = detect from the tokenizer
  std::string system_prompt;
};

// Reads user turns from stdin until EOF (Ctrl-D). Returns the exit code.
int RunChatRepl(Generator& gen, const Tokenizer& tok, const ChatOptions& opts);

}  // namespace infera::cli
