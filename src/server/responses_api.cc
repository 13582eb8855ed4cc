#include "server/responses_api.h"

#include <fmt/format.h>

#include <cstring>

#include "base/json.h"

namespace infera::server {

using ojson = nlohmann::ordered_json;

void ResponsesStore::Put(const std::string& id, std::shared_ptr<const StoredResponse> r) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.emplace_front(id, std::move(r));
  index_[id] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::shared_ptr<const StoredResponse> ResponsesStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);  // most recently used
  return it->second->second;
}

bool ResponsesStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponsesStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

namespace {

// The text of a message's content: a string, or a list of text parts
// (input_text; output_text and refusal in assistant turns).
bool ContentText(const ojson& content, const std::string& role, std::string* out, ApiError* err) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array())
    return SetBadValue(err, "input", "a message's 'content' must be a string or a list of parts");
  out->clear();
  for (const ojson& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    const bool text_part = type == "input_text" || type == "output_text" || (type == "refusal" && role == "assistant");
    const char* key = type == "refusal" ? "refusal" : "text";
    if (text_part && part.contains(key) && part[key].is_string()) {
      *out += part[key].get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      return SetBadValue(err, "input", fmt::format("'{}' parts are not supported (a text-only model)", type));
    } else {
      return SetBadValue(err, "input",
                         fmt::format("content part type '{}' is not supported (input_text, output_text)", type));
    }
  }
  return true;
}

// One input item -> chat messages appended to `messages`; the item, with an
// id, to `items`.
bool ConvertItem(const ojson& item, const std::string& id_suffix, size_t index, ojson* messages, ojson* items,
                 ApiError* err) {
  if (!item.is_object()) return SetBadValue(err, "input", "each input item must be an object");
  std::string type = item.value("type", "");
  if (type.empty() && item.contains("role")) type = "message";
  ojson kept = item;
  const std::string item_id = fmt::format("{}_{}_{}", type == "message" ? "msg" : "item", id_suffix, index);
  if (type == "message") {
    if (!item.contains("role") || !item["role"].is_string() || !item.contains("content")) {
      return SetBadValue(err, "input", "a message item needs a 'role' and a 'content'");
    }
    std::string role = item["role"].get<std::string>();
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
      return SetBadValue(err, "input",
                         fmt::format("unsupported message role '{}' (user, assistant, system, developer)", role));
    }
    std::string text;
    if (!ContentText(item["content"], role, &text, err)) return false;
    if (role == "developer") role = "system";
    messages->push_back({{"role", role}, {"content", text}});
    kept["type"] = "message";
    if (item["content"].is_string()) {
      kept["content"] =
          ojson::array({{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", item["content"]}}});
    }
  } else if (type == "function_call") {
    if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("name") ||
        !item["name"].is_string() || !item.contains("arguments") || !item["arguments"].is_string()) {
      return SetBadValue(err, "input", "a function_call item needs string 'call_id', 'name' and 'arguments'");
    }
    const ojson call = {{"id", item["call_id"]},
                        {"type", "function"},
                        {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
    // Calls right after an assistant message (or other calls) are that turn's.
    if (!messages->empty() && messages->back().value("role", "") == "assistant") {
      ojson& last = messages->back();
      if (!last.contains("tool_calls")) last["tool_calls"] = ojson::array();
      last["tool_calls"].push_back(call);
    } else {
      messages->push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}});
    }
  } else if (type == "function_call_output") {
    if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output")) {
      return SetBadValue(err, "input", "a function_call_output item needs a string 'call_id' and an 'output'");
    }
    std::string output;
    if (!ContentText(item["output"], "tool", &output, err)) return false;
    messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
  } else if (type == "reasoning") {
    // An earlier turn's reasoning: not sent back to the model.
  } else {
    return SetBadValue(err, "input",
                       fmt::format("input item type '{}' is not supported (message, function_call, "
                                   "function_call_output, reasoning)",
                                   type));
  }
  if (!kept.contains("id") || !kept["id"].is_string()) kept["id"] = item_id;
  items->push_back(std::move(kept));
  return true;
}

bool ConvertTools(const ojson& v, ojson* chat_tools, ApiError* err) {
  if (!v.is_array()) return SetBadValue(err, "tools", "'tools' must be a list");
  *chat_tools = ojson::array();
  for (const ojson& t : v) {
    const std::string type = t.is_object() ? t.value("type", "") : "";
    if (type != "function") {
      return SetBadValue(err, "tools", fmt::format("tool type '{}' is not supported (only function tools)", type));
    }
    if (!t.contains("name") || !t["name"].is_string())
      return SetBadValue(err, "tools", "a function tool needs a 'name'");
    ojson fn = {{"name", t["name"]}};
    if (t.contains("description") && !t["description"].is_null()) fn["description"] = t["description"];
    fn["parameters"] =
        t.contains("parameters") && !t["parameters"].is_null() ? t["parameters"] : ojson{{"type", "object"}};
    if (t.contains("strict") && !t["strict"].is_null()) fn["strict"] = t["strict"];
    chat_tools->push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return true;
}

// tool_choice -> the chat request's (allowed_tools narrows its tools).
bool ConvertToolChoice(const ojson& v, ojson* chat, ApiError* err) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s != "auto" && s != "none" && s != "required")
      return SetBadValue(err, "tool_choice", "'tool_choice' must be auto, none or required");
    (*chat)["tool_choice"] = s;
    return true;
  }
  const std::string type = v.is_object() ? v.value("type", "") : "";
  if (type == "function" && v.contains("name") && v["name"].is_string()) {
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", v["name"]}}}};
    return true;
  }
  if (type == "allowed_tools" && v.contains("tools") && v["tools"].is_array()) {
    const std::string mode = v.value("mode", "auto");
    if (mode != "auto" && mode != "required")
      return SetBadValue(err, "tool_choice", "allowed_tools' 'mode' must be auto or required");
    ojson kept = ojson::array();
    for (const ojson& t : chat->value("tools", ojson::array())) {
      for (const ojson& a : v["tools"]) {
        if (a.is_object() && a.value("type", "") == "function" && a.contains("name") &&
            a["name"] == t["function"]["name"]) {
          kept.push_back(t);
          break;
        }
      }
    }
    if (kept.empty()) return SetBadValue(err, "tool_choice", "allowed_tools names none of the request's tools");
    (*chat)["tools"] = std::move(kept);
    (*chat)["tool_choice"] = mode;
    return true;
  }
  return SetBadValue(err, "tool_choice",
                     "'tool_choice' must be auto, none, required, {\"type\": \"function\", \"name\": string} or "
                     "{\"type\": \"allowed_tools\", ...}");
}

// text.format -> response_format.
bool ConvertTextConfig(const ojson& v, ojson* chat, ApiError* err) {
  if (!v.is_object()) return SetBadValue(err, "text", "'text' must be an object");
  for (const auto& [key, value] : v.items()) {
    if (key == "verbosity") {
      if (!value.is_null() && value != "low" && value != "medium" && value != "high")
        return SetBadValue(err, "text.verbosity", "'verbosity' must be low, medium or high");
    } else if (key != "format") {
      return SetBadValue(err, "text", fmt::format("text field '{}' is not supported", key));
    }
  }
  if (!v.contains("format") || v["format"].is_null()) return true;
  const ojson& f = v["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "text") return true;
  if (type == "json_object") {
    (*chat)["response_format"] = {{"type", "json_object"}};
    return true;
  }
  if (type == "json_schema") {
    if (!f.contains("schema") || !f["schema"].is_object())
      return SetBadValue(err, "text.format", "a json_schema format needs a 'schema' object");
    ojson js = {{"name", f.value("name", "response")}, {"schema", f["schema"]}};
    if (f.contains("strict") && !f["strict"].is_null()) js["strict"] = f["strict"];
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    return true;
  }
  return SetBadValue(err, "text.format", "text.format type must be text, json_object or json_schema");
}

bool IsNull(const ojson& body, const char* key) { return !body.contains(key) || body[key].is_null(); }

}  // namespace

bool ResponsesToChatRequest(const std::string& body_text, ResponsesStore* store, bool count_tokens,
                            const std::string& id_suffix, ResponsesTurn* out, ApiError* err) {
  ojson body;
  if (!ParseJsonBody(body_text, &body, err)) return false;
  ojson chat = ojson::object();
  ojson echo = {{"instructions", nullptr},
                {"max_output_tokens", nullptr},
                {"metadata", ojson::object()},
                {"parallel_tool_calls", true},
                {"previous_response_id", nullptr},
                {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                {"store", true},
                {"temperature", 1.0},
                {"text", {{"format", {{"type", "text"}}}}},
                {"tool_choice", "auto"},
                {"tools", ojson::array()},
                {"top_p", 1.0},
                {"top_logprobs", 0},
                {"truncation", "disabled"},
                {"user", nullptr},
                {"background", false},
                {"service_tier", "default"},
                {"max_tool_calls", nullptr},
                {"safety_identifier", nullptr},
                {"prompt_cache_key", nullptr}};
  bool want_logprobs = false;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "model" || key == "stream") {
      chat[key] = v;
    } else if (key == "temperature" || key == "top_p" || key == "parallel_tool_calls") {
      chat[key] = v;
      echo[key] = v;
    } else if (key == "top_k" || key == "min_p" || key == "seed" || key == "stop" || key == "presence_penalty" ||
               key == "frequency_penalty" || key == "repetition_penalty" || key == "priority" || key == "ignore_eos") {
      chat[key] = v;  // vLLM's sampling extras
    } else if (key == "max_output_tokens") {
      chat["max_tokens"] = v;
      echo[key] = v;
    } else if (key == "input" || key == "instructions" || key == "previous_response_id" || key == "tool_choice") {
      // (below, in order)
    } else if (key == "user" || key == "safety_identifier") {
      if (!v.is_string()) return SetBadValue(err, key, fmt::format("'{}' must be a string", key));
      chat["user"] = v;
      echo[key] = v;
    } else if (key == "metadata") {
      if (!v.is_object() || v.size() > 16)
        return SetBadValue(err, key, "'metadata' must be an object of at most 16 keys");
      for (const auto& [mk, mv] : v.items()) {
        if (mk.size() > 64 || !mv.is_string() || mv.get_ref<const std::string&>().size() > 512)
          return SetBadValue(err, key, "'metadata' keys are strings of at most 64 characters, values of at most 512");
      }
      echo[key] = v;
    } else if (key == "tools") {
      ojson tools;
      if (!ConvertTools(v, &tools, err)) return false;
      if (!tools.empty()) chat["tools"] = std::move(tools);
      echo[key] = v;
    } else if (key == "text") {
      if (!ConvertTextConfig(v, &chat, err)) return false;
      echo[key] = v;
    } else if (key == "store") {
      if (!v.is_boolean()) return SetBadValue(err, key, "'store' must be a boolean");
      out->store = v.get<bool>();
      echo[key] = v;
    } else if (key == "top_logprobs") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 20)
        return SetBadValue(err, key, "'top_logprobs' must be an integer from 0 to 20");
      echo[key] = v;
    } else if (key == "include") {
      if (!v.is_array()) return SetBadValue(err, key, "'include' must be a list");
      for (const ojson& s : v) {
        if (!s.is_string()) return SetBadValue(err, key, "'include' must be a list of strings");
        const std::string what = s.get<std::string>();
        if (what == "message.output_text.logprobs") {
          want_logprobs = true;
        } else if (what != "reasoning.encrypted_content" && what != "message.input_image.image_url" &&
                   what != "file_search_call.results" && what != "web_search_call.results" &&
                   what != "web_search_call.action.sources" && what != "code_interpreter_call.outputs" &&
                   what != "computer_call_output.output.image_url") {
          return SetBadValue(err, key, fmt::format("unknown 'include' value '{}'", what));
        }  // (the others add to items this server never produces)
      }
    } else if (key == "reasoning") {
      if (!v.is_object()) return SetBadValue(err, key, "'reasoning' must be an object");
      echo[key] = {{"effort", v.value("effort", ojson())}, {"summary", v.value("summary", ojson())}};
    } else if (key == "truncation") {
      if (v != "disabled") {
        return SetBadValue(err, key,
                           "truncation 'auto' is not supported: an input longer than the context is refused "
                           "('disabled')");
      }
    } else if (key == "background") {
      if (v != false) return SetBadValue(err, key, "background responses are not supported");
    } else if (key == "service_tier") {
      if (!v.is_string()) return SetBadValue(err, key, "'service_tier' must be a string");
    } else if (key == "prompt_cache_key" || key == "prompt_cache_retention") {
      if (!v.is_string()) return SetBadValue(err, key, fmt::format("'{}' must be a string", key));
      if (key == "prompt_cache_key") echo[key] = v;  // (the prefix cache needs no key)
    } else if (key == "stream_options") {
      if (!v.is_object()) return SetBadValue(err, key, "'stream_options' must be an object");
    } else if (key == "max_tool_calls" || key == "conversation" || key == "prompt" || key == "context_management") {
      return SetBadValue(err, key, fmt::format("'{}' is not supported", key));
    } else {
      return SetBadValue(err, key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    if (!ConvertToolChoice(body["tool_choice"], &chat, err)) return false;
    echo["tool_choice"] = body["tool_choice"];
  }
  if (want_logprobs) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = echo["top_logprobs"];
  }
  out->logprobs = want_logprobs;

  ojson messages = ojson::array();
  if (!IsNull(body, "instructions")) {
    if (!body["instructions"].is_string()) return SetBadValue(err, "instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
    echo["instructions"] = body["instructions"];
  }
  ojson history = ojson::array();
  if (!IsNull(body, "previous_response_id")) {
    const ojson& prev = body["previous_response_id"];
    if (!prev.is_string()) return SetBadValue(err, "previous_response_id", "'previous_response_id' must be a string");
    std::shared_ptr<const StoredResponse> stored = store != nullptr ? store->Get(prev.get<std::string>()) : nullptr;
    if (stored == nullptr) {
      err->status = 404;
      err->param = "previous_response_id";
      err->code = "previous_response_not_found";
      err->message = fmt::format("Previous response with id '{}' not found.", prev.get<std::string>());
      return false;
    }
    history = stored->history;
    echo["previous_response_id"] = prev;
  }
  if (IsNull(body, "input")) return SetBadValue(err, "input", "'input' is required");
  const ojson& input = body["input"];
  ojson items = ojson::array();
  if (input.is_string()) {
    ConvertItem({{"type", "message"}, {"role", "user"}, {"content", input}}, id_suffix, 0, &history, &items, err);
  } else if (input.is_array()) {
    if (input.empty()) return SetBadValue(err, "input", "'input' must not be an empty list");
    for (size_t i = 0; i < input.size(); ++i) {
      if (!ConvertItem(input[i], id_suffix, i, &history, &items, err)) return false;
    }
  } else {
    return SetBadValue(err, "input", "'input' must be a string or a list of items");
  }
  if (!count_tokens && chat.contains("stream") && !chat["stream"].is_boolean())
    return SetBadValue(err, "stream", "'stream' must be a boolean");
  if (count_tokens) {
    chat.erase("max_tokens");
    chat.erase("stream");
    chat.erase("logprobs");
    chat.erase("top_logprobs");
  }
  for (const ojson& m : history) messages.push_back(m);
  chat["messages"] = std::move(messages);
  out->chat_body = DumpJson(chat);
  out->echo = std::move(echo);
  out->history = std::move(history);
  out->input_items = std::move(items);
  return true;
}

std::string ResponsesParam(const std::string& chat_param) {
  if (chat_param == "max_tokens") return "max_output_tokens";
  if (chat_param == "messages") return "input";
  if (chat_param == "response_format") return "text.format";
  if (chat_param == "logprobs") return "include";
  return chat_param;
}

ojson ResponsesMessageItem(const std::string& id_suffix, const ResponsesOutput& out, const char* status,
                           bool with_logprobs) {
  ojson part = {{"type", "output_text"}, {"text", out.text}, {"annotations", ojson::array()}};
  if (with_logprobs) part["logprobs"] = out.logprobs.is_array() ? out.logprobs : ojson::array();
  return {{"id", "msg_" + id_suffix},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", ojson::array({std::move(part)})}};
}

ojson ResponsesCallItem(const std::string& id_suffix, size_t i, const ToolCall& call, const char* status) {
  return {{"id", fmt::format("fc_{}_{}", id_suffix, i)},
          {"type", "function_call"},
          {"status", status},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", call.arguments}};
}

ojson ResponsesOutputItems(const std::string& id_suffix, const ResponsesOutput& out, const char* status,
                           bool with_logprobs) {
  ojson items = ojson::array();
  if (!out.text.empty()) items.push_back(ResponsesMessageItem(id_suffix, out, status, with_logprobs));
  for (size_t i = 0; i < out.calls.size(); ++i) items.push_back(ResponsesCallItem(id_suffix, i, out.calls[i], status));
  return items;
}

ojson ResponseObject(const ResponsesTurn& turn, const std::string& id, int64_t created_at, const std::string& model,
                     const char* status, ojson output, const ResponsesUsage* usage, const std::string& error_message) {
  const bool failed = std::strcmp(status, "failed") == 0;
  const bool incomplete = std::strcmp(status, "incomplete") == 0;
  ojson r = {{"id", id},
             {"object", "response"},
             {"created_at", created_at},
             {"status", status},
             {"error", failed ? ojson{{"code", "server_error"}, {"message", error_message}} : ojson()},
             {"incomplete_details", incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson()},
             {"model", model},
             {"output", std::move(output)}};
  for (const auto& [key, value] : turn.echo.items()) r[key] = value;
  if (usage == nullptr) {
    r["usage"] = nullptr;
  } else {
    r["usage"] = {{"input_tokens", usage->input},
                  {"input_tokens_details", {{"cached_tokens", usage->cached}}},
                  {"output_tokens", usage->output},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->input + usage->output}};
  }
  return r;
}

ojson ResponsesHistoryAfter(const ResponsesTurn& turn, const ResponsesOutput& out) {
  ojson history = turn.history;
  ojson reply = {{"role", "assistant"}, {"content", out.text}};
  if (!out.calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCall& c : out.calls) {
      calls.push_back(
          {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    reply["tool_calls"] = std::move(calls);
  }
  history.push_back(std::move(reply));
  return history;
}

}  // namespace infera::server
