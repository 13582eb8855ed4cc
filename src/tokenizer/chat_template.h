// How a conversation becomes a prompt. By default the model's own Jinja
// template (GGUF tokenizer.chat_template, HF tokenizer_config.json) is run by
// infera's Jinja interpreter (src/jinja), as transformers runs it. Built-in
// C++ renderings of the common families remain: picked by name
// (--chat-template NAME), or the fallback when a model's template fails to
// parse (recognized by its markers, as llama.cpp does); a model without any
// template gets a plain "User:/Assistant:" format with a warning.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infera/status.h"
#include "jinja/template.h"
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
  // Jinja only: the tools offered (OpenAI `tools`, null if none), and extra
  // template variables (vLLM's chat_template_kwargs, e.g. enable_thinking).
  nlohmann::ordered_json tools;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // Jinja only: further members of the message as the template sees it
  // (tool_calls, tool_call_id, name, reasoning_content; "content": null).
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
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

// A chat template: a Jinja template or a built-in format. Cheap to copy,
// immutable, safe to use from many threads.
class ChatTemplate {
 public:
  ChatTemplate() = default;  // the plain format
  explicit ChatTemplate(ChatFormat builtin) : builtin_(builtin) {}
  // InvalidArgument ("chat template: line N: ...") if `source` does not parse.
  static StatusOr<ChatTemplate> FromJinja(std::string_view source);

  bool is_jinja() const { return jinja_ != nullptr; }
  ChatFormat builtin() const { return builtin_; }  // meaningless when is_jinja()
  std::string Name() const;                        // "jinja" or the built-in's name
  const std::string& jinja_source() const;         // "" for a built-in

  // The prompt text. A Jinja template sees messages, add_generation_prompt,
  // bos_token / eos_token (bos_text / eos_text), tools and opts.kwargs, as
  // transformers' apply_chat_template passes them; its raise_exception and
  // run-time errors are InvalidArgument.
  StatusOr<std::string> Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const ChatTemplateOptions& opts, const std::string& bos_text = "",
                               const std::string& eos_text = "") const;

 private:
  ChatFormat builtin_ = ChatFormat::kPlain;
  std::shared_ptr<const jinja::Template> jinja_;
};

// The conversation's prompt text, with the vocabulary's BOS / EOS texts
// (what EncodeChat tokenizes, except built-in Mistral's turn-by-turn path).
StatusOr<std::string> RenderChatText(const Tokenizer& tok, const ChatTemplate& tmpl,
                                     const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                     ChatTemplateOptions opts = {});

// Token ids of the conversation. Built-in Mistral is tokenized turn by turn
// (as mistral-common does); the others render text and tokenize it with
// special tokens recognized. A Jinja rendering that does not start with BOS
// gets one when the vocabulary asks for it (never a second).
StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                          ChatTemplateOptions opts = {});

}  // namespace infera
