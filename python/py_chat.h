// The Python API's chat messages: vLLM's message dicts (roles, content,
// tool calls, extra fields for Jinja templates) to a chat template's
// tokens.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"
#include "python/py_sampling_params.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infera::python {

namespace py = pybind11;

// A Python value as ordered JSON (json.dumps keeps dict order).
inline nlohmann::ordered_json ToOrderedJson(const py::handle& v) {
  const std::string text = py::module_::import("json").attr("dumps")(v).cast<std::string>();
  return infera::ParseOrderedJson(text);
}

// One conversation (vLLM's message dicts) rendered by `tmpl` and tokenized.
// tools / kwargs: given to a Jinja template (None: none). Raises ValueError
// for a malformed message or an option the template cannot take.
inline std::vector<int32_t> EncodeChatMessages(const Tokenizer& tok, const ChatTemplate& tmpl, const py::list& conv,
                                               bool add_generation_prompt, const py::object& tools,
                                               const py::object& kwargs) {
  const bool jinja = tmpl.is_jinja();
  std::vector<ChatMessage> msgs;
  for (const auto& m : conv) {
    if (!py::isinstance<py::dict>(m)) throw py::value_error("each message must be a dict with 'role' and 'content'");
    py::dict d = m.cast<py::dict>();
    if (!d.contains("role") || !py::isinstance<py::str>(d["role"]))
      throw py::value_error("each message needs a string 'role'");
    const std::string role = d["role"].cast<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && !(jinja && role == "tool")) {
      throw py::value_error("message role must be system, user or assistant (tool with a Jinja template), not '" +
                            role + "'");
    }
    ChatMessage cm;
    cm.role = role;
    const bool has_calls = d.contains("tool_calls") && !d["tool_calls"].is_none();
    if (d.contains("content") && py::isinstance<py::str>(d["content"])) {
      cm.content = d["content"].cast<std::string>();
    } else if (!(role == "assistant" && has_calls && jinja && (!d.contains("content") || d["content"].is_none()))) {
      throw py::value_error("each message needs a string 'content' (None only beside tool_calls)");
    } else {
      cm.extra["content"] = nullptr;
    }
    for (const auto& [k, v] : d) {
      const std::string key = k.cast<std::string>();
      if (key == "role" || key == "content") continue;
      if (!jinja && key != "name") throw py::value_error("message field '" + key + "' needs a Jinja chat template");
      cm.extra[key] = ToOrderedJson(v);
    }
    // Each call's arguments as an object, as HF templates expect (vLLM's conversion).
    if (cm.extra.contains("tool_calls") && cm.extra["tool_calls"].is_array()) {
      for (auto& call : cm.extra["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        auto& args = call["function"]["arguments"];
        if (!args.is_string()) continue;
        auto parsed = infera::ParseOrderedJson(args.get<std::string>());
        if (!parsed.is_discarded() && parsed.is_object()) args = std::move(parsed);
      }
    }
    msgs.push_back(std::move(cm));
  }
  if (msgs.empty()) throw py::value_error("a conversation needs at least one message");
  ChatTemplateOptions opts;
  if (!tools.is_none()) {
    if (!jinja) throw py::value_error("tools need a Jinja chat template (the model's, or chat_template=...)");
    if (!py::isinstance<py::list>(tools)) throw py::value_error("tools must be a list of tool dicts");
    opts.tools = ToOrderedJson(tools);
  }
  if (!kwargs.is_none()) {
    if (!py::isinstance<py::dict>(kwargs)) throw py::value_error("chat_template_kwargs must be a dict");
    for (const auto& [k, v] : kwargs.cast<py::dict>()) {
      const std::string key = k.cast<std::string>();
      if (jinja) {
        opts.kwargs[key] = ToOrderedJson(v);
      } else if (key == "enable_thinking" && py::isinstance<py::bool_>(v)) {
        opts.enable_thinking = v.cast<bool>();
      } else {
        throw py::value_error("the built-in chat format takes chat_template_kwargs enable_thinking only");
      }
    }
  }
  auto ids = EncodeChat(tok, tmpl, msgs, add_generation_prompt, opts);
  if (!ids.ok()) Raise(ids.status());
  return std::move(ids).value();
}

}  // namespace infera::python
