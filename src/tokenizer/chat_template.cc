#include "tokenizer/chat_template.h"

namespace infera {
namespace {

bool Has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// Folds a leading system message into the first user turn (families with no
// system role).
std::vector<ChatMessage> FoldSystem(const std::vector<ChatMessage>& in, const std::string& sep) {
  std::vector<ChatMessage> out;
  std::string system;
  for (const auto& m : in) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.content;
      continue;
    }
    out.push_back(m);
    if (!system.empty() && m.role == "user") {
      out.back().content = system + sep + m.content;
      system.clear();
    }
  }
  return out;
}

// An assistant turn without its reasoning: the text after the last
// "</think>", leading newlines removed (Qwen3's template).
std::string WithoutThinking(const std::string& content) {
  const size_t end = content.rfind("</think>");
  if (end == std::string::npos) return content;
  const size_t start = content.find_first_not_of('\n', end + 8);
  return start == std::string::npos ? std::string() : content.substr(start);
}

}  // namespace

const char* ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kPlain: return "plain";
    case ChatFormat::kChatml: return "chatml";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kPhi3: return "phi3";
    case ChatFormat::kZephyr: return "zephyr";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kQwen3: return "qwen3";
    case ChatFormat::kTulu: return "tulu";
  }
  return "?";
}

bool ParseChatFormat(const std::string& name, ChatFormat* out) {
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kChatml, ChatFormat::kLlama2, ChatFormat::kLlama3,
                       ChatFormat::kMistral, ChatFormat::kPhi3, ChatFormat::kZephyr, ChatFormat::kGemma,
                       ChatFormat::kQwen3, ChatFormat::kTulu}) {
    if (name == ChatFormatName(f)) {
      *out = f;
      return true;
    }
  }
  if (name == "qwen" || name == "qwen2") { *out = ChatFormat::kChatml; return true; }
  if (name == "olmo2") { *out = ChatFormat::kTulu; return true; }
  if (name == "gemma2" || name == "gemma3") { *out = ChatFormat::kGemma; return true; }
  return false;
}

ChatFormat DetectChatFormat(const std::string& t, bool* known) {
  *known = true;
  if (Has(t, "<|im_start|>") && Has(t, "<think>")) return ChatFormat::kQwen3;
  if (Has(t, "<|im_start|>")) return ChatFormat::kChatml;
  if (Has(t, "<|start_header_id|>")) return ChatFormat::kLlama3;
  if (Has(t, "<|user|>") && Has(t, "<|end|>")) return ChatFormat::kPhi3;
  // Tulu / OLMo 2 end user turns with a newline and only replies with EOS.
  if (Has(t, "<|user|>") && Has(t, "<|assistant|>") && Has(t, "message['content'] + '\\n'") && Has(t, "eos_token") &&
      !Has(t, "</s>")) {
    return ChatFormat::kTulu;
  }
  if (Has(t, "<|user|>")) return ChatFormat::kZephyr;
  if (Has(t, "<start_of_turn>")) return ChatFormat::kGemma;
  if (Has(t, "[INST]") && Has(t, "<<SYS>>")) return ChatFormat::kLlama2;
  if (Has(t, "[INST]")) return ChatFormat::kMistral;
  *known = false;
  return ChatFormat::kPlain;
}

std::string RenderChat(ChatFormat f, const std::vector<ChatMessage>& messages, bool gen, const ChatTemplateOptions& opts) {
  std::string s;
  switch (f) {
    case ChatFormat::kQwen3: {
      size_t last_user = 0;
      for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == "user") last_user = i;
      }
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        const bool strip = m.role == "assistant" && i < last_user;
        s += "<|im_start|>" + m.role + "\n" + (strip ? WithoutThinking(m.content) : m.content) + "<|im_end|>\n";
      }
      if (gen) {
        s += "<|im_start|>assistant\n";
        if (!opts.enable_thinking) s += "<think>\n\n</think>\n\n";
      }
      return s;
    }
    case ChatFormat::kTulu:
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        if (m.role == "assistant") {
          s += "<|assistant|>\n" + m.content + opts.eos_text + (i + 1 < messages.size() ? "\n" : "");
        } else {
          s += "<|" + m.role + "|>\n" + m.content + "\n";
        }
      }
      if (gen) s += "<|assistant|>\n";
      return s;
    case ChatFormat::kChatml:
      for (const auto& m : messages) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (gen) s += "<|im_start|>assistant\n";
      return s;
    case ChatFormat::kLlama3:
      s = "<|begin_of_text|>";
      for (const auto& m : messages) s += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (gen) s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return s;
    case ChatFormat::kPhi3:
      for (const auto& m : messages) s += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (gen) s += "<|assistant|>\n";
      return s;
    case ChatFormat::kZephyr:
      for (const auto& m : messages) s += "<|" + m.role + "|>\n" + m.content + "</s>\n";
      if (gen) s += "<|assistant|>\n";
      return s;
    case ChatFormat::kGemma:
      s = "<bos>";
      for (const auto& m : FoldSystem(messages, "\n\n")) {
        s += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" + m.content + "<end_of_turn>\n";
      }
      if (gen) s += "<start_of_turn>model\n";
      return s;
    case ChatFormat::kLlama2: {
      // <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user2 [/INST]
      std::string system;
      bool first_user = true;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = m.content;
        } else if (m.role == "user") {
          s += "<s>[INST] ";
          if (first_user && !system.empty()) s += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
          s += m.content + " [/INST]";
          first_user = false;
        } else {
          s += " " + m.content + " </s>";
        }
      }
      return s;
    }
    case ChatFormat::kMistral: {
      s = "<s>";
      for (const auto& m : FoldSystem(messages, "\n\n")) {
        if (m.role == "user") s += "[INST] " + m.content + " [/INST]";
        else s += " " + m.content + "</s>";
      }
      return s;
    }
    case ChatFormat::kPlain:
      // "Who: text" lines. A generated reply usually starts with its own
      // space, so no second one is added: rendering the conversation then
      // extends the text the model saw, token for token.
      for (const auto& m : messages) {
        const std::string who = m.role == "system" ? "System" : m.role == "user" ? "User" : "Assistant";
        const bool spaced = !m.content.empty() && (m.content[0] == ' ' || m.content[0] == '\n');
        s += who + ":" + (spaced ? "" : " ") + m.content + "\n";
      }
      if (gen) s += "Assistant:";
      return s;
  }
  return s;
}

StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view source) {
  ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source));
  ChatTemplate out;
  out.jinja_ = std::make_shared<const jinja::Template>(std::move(t));
  return out;
}

std::string ChatTemplate::Name() const { return is_jinja() ? "jinja" : ChatFormatName(builtin_); }

const std::string& ChatTemplate::jinja_source() const {
  static const std::string kEmpty;
  return is_jinja() ? jinja_->source() : kEmpty;
}

StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages, bool gen,
                                           const ChatTemplateOptions& opts, const std::string& bos_text,
                                           const std::string& eos_text) const {
  if (!is_jinja()) return RenderChat(builtin_, messages, gen, opts);
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    for (const auto& [k, v] : m.extra.items()) j[k] = v;
    msgs.push_back(std::move(j));
  }
  // As transformers' apply_chat_template: kwargs first, then the fixed names.
  for (const auto& [k, v] : opts.kwargs.items()) ctx[k] = v;
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = opts.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = gen;
  ctx["bos_token"] = bos_text;
  ctx["eos_token"] = eos_text;
  return jinja_->Render(ctx);
}

StatusOr<std::string> RenderChatText(const Tokenizer& tok, const ChatTemplate& tmpl,
                                     const std::vector<ChatMessage>& messages, bool gen, ChatTemplateOptions opts) {
  const Vocab& v = tok.vocab();
  const auto piece = [&](int32_t id) { return id >= 0 && id < v.size() ? v.pieces[id] : std::string(); };
  if (v.eos >= 0 && v.eos < v.size()) opts.eos_text = piece(v.eos);
  return tmpl.Render(messages, gen, opts, piece(v.bos), piece(v.eos));
}

StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                          const std::vector<ChatMessage>& messages, bool gen,
                                          ChatTemplateOptions opts) {
  const Vocab& v = tok.vocab();
  if (tmpl.is_jinja()) {
    ASSIGN_OR_RETURN(std::string text, RenderChatText(tok, tmpl, messages, gen, opts));
    std::vector<int32_t> ids = tok.Encode(text, false, true);
    if (v.add_bos && v.bos >= 0 && (ids.empty() || ids[0] != v.bos)) ids.insert(ids.begin(), v.bos);
    return ids;
  }
  const ChatFormat f = tmpl.builtin();
  if (f != ChatFormat::kMistral) {
    const bool bos_in_text = f == ChatFormat::kLlama3 || f == ChatFormat::kLlama2 || f == ChatFormat::kGemma;
    // Tulu's template starts with bos_token whatever add_bos says.
    const bool add_bos = f == ChatFormat::kTulu || tok.vocab().add_bos;
    std::vector<int32_t> ids;
    if (!bos_in_text && add_bos && tok.vocab().bos >= 0) ids.push_back(tok.vocab().bos);
    ASSIGN_OR_RETURN(std::string text, RenderChatText(tok, tmpl, messages, gen, opts));
    auto body = tok.Encode(text, false, true);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  // mistral-common (v1): BOS, then each turn tokenized on its own:
  // user -> "[INST] {content} [/INST]", assistant -> "{content}" + EOS.
  std::vector<int32_t> ids;
  if (tok.vocab().bos >= 0) ids.push_back(tok.vocab().bos);
  for (const auto& m : FoldSystem(messages, "\n\n")) {
    std::vector<int32_t> t;
    if (m.role == "user") {
      t = tok.Encode("[INST] " + m.content + " [/INST]", false, false);
    } else {
      t = tok.Encode(m.content, false, false);
      if (tok.vocab().eos >= 0) t.push_back(tok.vocab().eos);
    }
    ids.insert(ids.end(), t.begin(), t.end());
  }
  return ids;
}

}  // namespace infera
