#include "server/anthropic.h"

#include <fmt/format.h>

#include "base/json.h"

namespace infera::server {

using ojson = nlohmann::ordered_json;

namespace {

// The text of a string or of a list of text blocks (tool results, system).
bool BlocksText(const ojson& v, const char* field, std::string* out, ApiError* err) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (!v.is_array())
    return SetBadValue(err, field, fmt::format("'{}' must be a string or a list of text blocks", field));
  out->clear();
  for (const ojson& b : v) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string()) {
      return SetBadValue(err, field,
                         fmt::format("'{}' blocks must be {{\"type\": \"text\", \"text\": string}}", field));
    }
    *out += b["text"].get<std::string>();
  }
  return true;
}

// One Anthropic message -> OpenAI messages appended to `out`.
bool ConvertMessage(const ojson& m, ojson* out, ApiError* err) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content")) {
    return SetBadValue(err, "messages", "each message needs a 'role' (user or assistant) and a 'content'");
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    return SetBadValue(err, "messages", fmt::format("unsupported message role '{}' (user, assistant)", role));
  }
  for (const auto& [key, value] : m.items()) {
    if (key != "role" && key != "content") {
      return SetBadValue(err, "messages", fmt::format("message field '{}' is not supported", key));
    }
  }
  const ojson& content = m["content"];
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content}});
    return true;
  }
  if (!content.is_array()) return SetBadValue(err, "messages", "'content' must be a string or a list of blocks");
  std::string text;
  ojson calls = ojson::array();
  for (const ojson& b : content) {
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string()) {
        return SetBadValue(err, "messages", "a tool_use block needs string 'id' and 'name'");
      }
      const ojson input = b.contains("input") ? b["input"] : ojson::object();
      calls.push_back(
          {{"id", b["id"]}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", DumpJson(input)}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) {
        return SetBadValue(err, "messages", "a tool_result block needs a string 'tool_use_id'");
      }
      std::string result;
      if (b.contains("content") && !b["content"].is_null() && !BlocksText(b["content"], "messages", &result, err)) {
        return false;
      }
      if (b.value("is_error", false) == true) result = "Error: " + result;
      out->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      continue;  // an earlier turn's reasoning: not sent back to the model
    } else {
      return SetBadValue(err, "messages",
                         fmt::format("content block type '{}' is not supported here (text; tool_use in assistant "
                                     "turns, tool_result in user turns)",
                                     type));
    }
  }
  if (role == "assistant") {
    ojson msg = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = calls;
    out->push_back(std::move(msg));
  } else if (!text.empty() || out->empty() || out->back().value("role", "") != "tool") {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return true;
}

}  // namespace

bool AnthropicToChatRequest(const std::string& body_text, bool count_tokens, std::string* chat_body, ApiError* err) {
  ojson body;
  if (!ParseJsonBody(body_text, &body, err)) return false;
  ojson chat = ojson::object();
  ojson messages = ojson::array();
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "model" || key == "temperature" || key == "top_p" || key == "top_k" || key == "stream") {
      chat[key] = v;
    } else if (key == "max_tokens") {
      chat["max_tokens"] = v;
    } else if (key == "stop_sequences") {
      chat["stop"] = v;
    } else if (key == "system") {
      std::string text;
      if (!BlocksText(v, "system", &text, err)) return false;
      messages.push_back({{"role", "system"}, {"content", text}});
    } else if (key == "messages") {
      if (!v.is_array() || v.empty()) return SetBadValue(err, "messages", "'messages' must be a non-empty list");
    } else if (key == "metadata") {
      if (!v.is_object()) return SetBadValue(err, "metadata", "'metadata' must be an object");
      if (v.contains("user_id") && v["user_id"].is_string()) chat["user"] = v["user_id"];
    } else if (key == "tools") {
      if (!v.is_array()) return SetBadValue(err, "tools", "'tools' must be a list");
      ojson tools = ojson::array();
      for (const ojson& t : v) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
          return SetBadValue(err, "tools", "each tool needs a string 'name' (and an 'input_schema')");
        }
        if (t.contains("type") && t["type"] != "custom") {
          return SetBadValue(err, "tools", fmt::format("server tool type {} is not supported", t["type"].dump()));
        }
        ojson fn = {{"name", t["name"]}};
        if (t.contains("description")) fn["description"] = t["description"];
        fn["parameters"] = t.contains("input_schema") ? t["input_schema"] : ojson{{"type", "object"}};
        tools.push_back({{"type", "function"}, {"function", fn}});
      }
      chat["tools"] = tools;
    } else if (key == "tool_choice") {
      const std::string type = v.is_object() ? v.value("type", "") : "";
      if (type == "auto") {
        chat["tool_choice"] = "auto";
      } else if (type == "any") {
        chat["tool_choice"] = "required";
      } else if (type == "none") {
        chat["tool_choice"] = "none";
      } else if (type == "tool" && v.contains("name") && v["name"].is_string()) {
        chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", v["name"]}}}};
      } else {
        return SetBadValue(err, "tool_choice",
                           "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", "
                           "\"name\": string}");
      }
      if (v.value("disable_parallel_tool_use", false) == true) chat["parallel_tool_calls"] = false;
    } else if (key == "thinking") {
      if (!v.is_object() || v.value("type", "") != "disabled") {
        return SetBadValue(err, "thinking", "extended thinking is not supported (only {\"type\": \"disabled\"})");
      }
    } else if (key == "service_tier") {
      if (v != "auto" && v != "standard_only")
        return SetBadValue(err, key, "'service_tier' must be auto or standard_only");
    } else {
      return SetBadValue(err, key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  if (!body.contains("messages") || body["messages"].is_null()) {
    return SetBadValue(err, "messages", "'messages' is required");
  }
  for (const ojson& m : body["messages"]) {
    if (!ConvertMessage(m, &messages, err)) return false;
  }
  if (!count_tokens && !chat.contains("max_tokens")) return SetBadValue(err, "max_tokens", "'max_tokens' is required");
  if (count_tokens) {  // only rendered and counted
    chat.erase("max_tokens");
    chat.erase("stream");
  }
  chat["messages"] = std::move(messages);
  *chat_body = DumpJson(chat);
  return true;
}

std::string AnthropicErrorBody(int status, const std::string& openai_body) {
  const nlohmann::json j = ParseJson(openai_body);
  std::string message = openai_body;
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) message = j["error"].value("message", "");
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  return DumpJson(nlohmann::json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}});
}

const char* AnthropicStopReason(const char* finish_reason, bool stopped_by_string) {
  const std::string f = finish_reason != nullptr ? finish_reason : "";
  if (f == "tool_calls") return "tool_use";
  if (f == "length") return "max_tokens";
  if (f == "stop") return stopped_by_string ? "stop_sequence" : "end_turn";
  return "end_turn";  // (abort / error never reach an answer)
}

}  // namespace infera::server
