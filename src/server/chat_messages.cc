// A chat request's messages: roles, content parts, tool calls and results,
// the chat template (the server's or a trusted request's own) and its
// arguments, and the tools' grammar; into the prompt's token ids.
#include <fmt/format.h>

#include "base/json.h"
#include "sampling/grammar.h"
#include "server/field_reader.h"

namespace infera::server {

using nlohmann::json;

namespace {

// The text of a message's content: a string, or a list of text parts.
bool ContentText(const json& content, std::string* out, FieldReader* r) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) return r->Fail("messages", "message content must be a string or a list of parts");
  for (const json& part : content) {
    if (!part.is_object()) return r->Fail("messages", "message content parts must be objects");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return r->Fail("messages", "message content parts need a 'type'");
    if (*type != "text") {
      return r->Fail("messages",
                     fmt::format("content parts of type '{}' are not supported (text only)", type->get<std::string>()));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return r->Fail("messages", "a text part needs a string 'text'");
    *out += text->get<std::string>();
  }
  return true;
}

// An assistant message's tool_calls, as the template sees them: OpenAI's
// list with each function's arguments parsed from their JSON text into an
// object (HF templates write `arguments | tojson`), as vLLM passes them.
bool ToolCallsForTemplate(const nlohmann::ordered_json& calls, nlohmann::ordered_json* out, FieldReader* r) {
  if (!calls.is_array()) return r->Fail("messages", "'tool_calls' must be a list");
  *out = nlohmann::ordered_json::array();
  for (const auto& c : calls) {
    auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return r->Fail("messages", "each tool call needs a 'function' with a string 'name'");
    }
    nlohmann::ordered_json call = c;
    if (auto args = fn->find("arguments"); args != fn->end() && args->is_string()) {
      auto parsed = ParseOrderedJson(args->get<std::string>());
      if (!parsed.is_discarded() && parsed.is_object()) call["function"]["arguments"] = std::move(parsed);
    }
    out->push_back(std::move(call));
  }
  return true;
}

}  // namespace

bool ParseMessages(const nlohmann::ordered_json& obody, const ToolRequest& treq, const ParseContext& ctx,
                   CompletionSpec* out, FieldReader* r) {
  const json* msgs = r->Find("messages");
  if (msgs == nullptr) return r->Fail("messages", "'messages' is required");
  if (!msgs->is_array() || msgs->empty()) return r->Fail("messages", "'messages' must be a non-empty list");
  const nlohmann::ordered_json* omsgs = obody.is_object() && obody.contains("messages") ? &obody["messages"] : nullptr;
  std::vector<ChatMessage> chat;
  bool tool_turns = false;  // tool calls or tool results in the conversation
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    if (!m.is_object()) return r->Fail("messages", "each message must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return r->Fail("messages", "each message needs a string 'role'");
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      return r->Fail("messages", fmt::format("unsupported message role '{}' (system, developer, user, assistant, tool)",
                                             role->get<std::string>()));
    }
    ChatMessage cm;
    cm.role = name;
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") continue;
      // The name is passed to the template, which (as every supported
      // family's own template) does not render it.
      if (key == "name" && (value.is_string() || value.is_null())) continue;
      const bool empty = value.is_null() || ((value.is_array() || value.is_string()) && value.empty());
      if ((key == "refusal" || key == "tool_calls" || key == "reasoning_content") && empty) continue;
      if (key == "tool_calls" && name == "assistant") {
        if (omsgs == nullptr || !ToolCallsForTemplate((*omsgs)[i]["tool_calls"], &cm.extra["tool_calls"], r))
          return false;
        tool_turns = true;
        continue;
      }
      if (key == "tool_call_id" && name == "tool" && value.is_string()) {
        cm.extra["tool_call_id"] = value.get<std::string>();
        continue;
      }
      if (key == "reasoning_content" && name == "assistant" && value.is_string() && ctx.chat_template.is_jinja()) {
        cm.extra["reasoning_content"] = value.get<std::string>();
        continue;
      }
      return r->Fail("messages", fmt::format("message field '{}' is not supported{}", key,
                                             key == "name" ? " (it must be a string)" : ""));
    }
    tool_turns |= name == "tool";
    auto content = m.find("content");
    const bool may_lack_content = name == "assistant" && cm.extra.contains("tool_calls");
    if (content == m.end() && !may_lack_content) return r->Fail("messages", "each message needs a 'content'");
    if (content != m.end() && !ContentText(*content, &cm.content, r)) return false;
    if (may_lack_content && (content == m.end() || content->is_null())) cm.extra["content"] = nullptr;
    if (auto n = m.find("name"); n != m.end() && n->is_string()) cm.extra["name"] = n->get<std::string>();
    chat.push_back(std::move(cm));
  }
  // vLLM's per-request chat_template: a Jinja template replacing the
  // server's, only when the operator trusts requests with one.
  ChatTemplate tmpl = ctx.chat_template;
  bool request_template = false;
  if (const json* t = r->Find("chat_template"); t != nullptr && !t->is_null()) {
    if (!t->is_string()) return r->Fail("chat_template", "'chat_template' must be a string");
    if (!t->get<std::string>().empty()) {
      if (!ctx.trust_request_chat_template) {
        return r->Fail("chat_template",
                       "per-request chat templates are off on this server (start it with "
                       "--trust-request-chat-template)");
      }
      auto parsed = ChatTemplate::FromJinja(t->get<std::string>());
      if (!parsed.ok()) return r->Fail("chat_template", std::string(parsed.status().message()));
      tmpl = *parsed;
      request_template = true;
    }
  }
  // vLLM's chat_template_kwargs: a Jinja template gets every argument as a
  // variable; the built-in formats understand enable_thinking (Qwen3) only,
  // and refuse others rather than ignore them.
  ChatTemplateOptions chat_opts;
  if (const json* kw = r->Find("chat_template_kwargs")) {
    if (!kw->is_object()) return r->Fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (tmpl.is_jinja()) {
        chat_opts.kwargs[it.key()] = ParseOrderedJson(DumpJson(*it));
        continue;
      }
      if (it.key() == "enable_thinking" && it->is_boolean()) {
        chat_opts.enable_thinking = it->get<bool>();
      } else if (it.key() == "enable_thinking") {
        return r->Fail("chat_template_kwargs", "'enable_thinking' must be true or false");
      } else {
        return r->Fail("chat_template_kwargs",
                       fmt::format("unsupported chat template argument '{}' (the built-in '{}' format takes "
                                   "enable_thinking only)",
                                   it.key(), tmpl.Name()));
      }
    }
  }
  // Tools go to the template, which tells the model how to call them; the
  // reply is parsed back in the template's tool-call format.
  if ((treq.any() || tool_turns) && !tmpl.is_jinja()) {
    return r->Fail(treq.any() ? "tools" : "messages",
                   fmt::format("tool calling needs a Jinja chat template (this server uses the built-in '{}' format; "
                               "start it with the model's template or --chat-template-file)",
                               tmpl.Name()));
  }
  if (treq.any()) {
    chat_opts.tools = treq.tools_json;
    const ToolCallFormat format =
        ctx.tool_format_explicit || !request_template ? ctx.tool_format : DetectToolCallFormat(tmpl.jinja_source());
    if (treq.choice != ToolRequest::Choice::kNone) {
      out->parse_tool_calls = true;
      out->tool_format = format;
    }
    if (treq.choice == ToolRequest::Choice::kRequired || treq.choice == ToolRequest::Choice::kNamed) {
      if (out->params.grammar) {
        return r->Fail("tool_choice",
                       "'tool_choice' and another output constraint (response_format, grammar, "
                       "guided_*) both constrain the output: give one");
      }
      auto gbnf = ToolCallGrammar(format, treq);
      if (!gbnf.ok()) return r->Fail("tools", std::string(gbnf.status().message()));
      auto g = Grammar::Parse(*gbnf);
      if (!g.ok()) return r->Fail("tools", fmt::format("tools: {}", g.status().message()));
      out->params.grammar = std::move(g).value();
      out->tool_named = treq.choice == ToolRequest::Choice::kNamed ? treq.named : "";
    }
  }
  bool add_generation_prompt = true;
  r->Bool("add_generation_prompt", &add_generation_prompt);
  if (!r->ok()) return false;
  auto ids = EncodeChat(*ctx.tokenizer, tmpl, chat, add_generation_prompt, chat_opts);
  if (!ids.ok()) return r->Fail("messages", std::string(ids.status().message()));
  if (ctx.render_chat_text) {
    auto text = RenderChatText(*ctx.tokenizer, tmpl, chat, add_generation_prompt, chat_opts);
    if (!text.ok()) return r->Fail("messages", std::string(text.status().message()));
    out->chat_text = std::move(text).value();
  }
  out->prompt_texts.push_back(ctx.tokenizer->Decode(*ids, true));
  out->prompts.push_back(std::move(ids).value());
  if (!tmpl.is_jinja() && tmpl.builtin() == ChatFormat::kPlain) out->params.stop.push_back("\nUser:");
  return true;
}

}  // namespace infera::server
