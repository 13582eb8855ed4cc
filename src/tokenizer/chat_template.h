// Chat formats of the common model families. A model's Jinja template
// (tokenizer.chat_template) is recognized by its markers, as llama.cpp does,
// and rendered by C++ code for that family; an unknown or missing template
// falls back to a plain "User:/Assistant:" format with a warning.
#pragma once

#include <string>
#include <vector>

#include "infera/status.h"
#include "tokenizer/tokenizer.h"

namespace infera {

// kQwen3: ChatML with Qwen3's thinking tags; kTulu: OLMo 2 / Tulu 3's
// <|user|> / <|assistant|> turns with EOS after each reply.
enum class ChatFormat { kPlain, kChatml, kLlama2, kLlama3, kMistral, kPhi3, kZephyr, kGemma, kQwen3, kTulu };

// Template arguments (the server's chat_template_kwargs).
struct ChatTemplateOptions {
  // Qwen3: false appends an empty "<think>\n\n</think>\n\n" to the
  // generation prompt, so the model answers without reasoning.
  bool enable_thinking = true;
  // kTulu: the text of the EOS token ending each assistant turn.
  std::string eos_text = "<|endoftext|>";
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

const char* ChatFormatName(ChatFormat f);
bool ParseChatFormat(const std::string& name, ChatFormat* out);
// Recognizes a Jinja chat template; kPlain (and *known = false) if unknown.
ChatFormat DetectChatFormat(const std::string& jinja, bool* known);

// The prompt text for `messages` (BOS included where the family writes it).
// add_generation_prompt: end with the assistant header, ready for a reply.
// Qwen3: the <think>...</think> part of assistant turns before the last user
// turn is dropped, as its template does.
std::string RenderChat(ChatFormat f, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                       const ChatTemplateOptions& opts = {});

// Token ids of the conversation. Mistral is tokenized turn by turn (as
// mistral-common does); the others render text and tokenize it with special
// tokens recognized.
std::vector<int32_t> EncodeChat(const Tokenizer& tok, ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, ChatTemplateOptions opts = {});

}  // namespace infera
