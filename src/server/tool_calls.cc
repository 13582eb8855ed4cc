#include "server/tool_calls.h"

#include <cstring>

#include <fmt/format.h>

#include "base/json.h"
#include "sampling/grammar.h"
#include "server/json_schema_grammar.h"

namespace infera::server {

using nlohmann::json;
using OJson = nlohmann::ordered_json;

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kMistralMarker = "[TOOL_CALLS]";
constexpr const char* kPythonTag = "<|python_tag|>";

bool Has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string ToolCallId(ToolCallFormat f, uint64_t seed, size_t index) {
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  std::string id = f == ToolCallFormat::kMistral ? "" : "call_";
  const int n = f == ToolCallFormat::kMistral ? 9 : 24;
  for (int i = 0; i < n; ++i) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    id += kAlnum[z % 62];
  }
  return id;
}

namespace {

// {"name": ..., "arguments" | "parameters": ...} -> a call; false if not one.
bool CallFromJson(const json& j, ToolCall* out) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  out->name = name->get<std::string>();
  if (args == j.end() || args->is_null()) {
    out->arguments = "{}";
  } else if (args->is_string()) {
    out->arguments = args->get<std::string>();  // already JSON text (some models write it so)
  } else {
    out->arguments = args->dump();
  }
  return true;
}

// A JSON object or a list of them -> calls; false unless all are calls.
bool CallsFromText(const std::string& text, std::vector<ToolCall>* out) {
  const json j = ParseJson(text);
  if (j.is_discarded()) return false;
  std::vector<ToolCall> calls;
  const auto add = [&](const json& e) {
    ToolCall c;
    if (!CallFromJson(e, &c)) return false;
    calls.push_back(std::move(c));
    return true;
  };
  if (j.is_array()) {
    if (j.empty()) return false;
    for (const json& e : j) {
      if (!add(e)) return false;
    }
  } else if (!add(j)) {
    return false;
  }
  out->insert(out->end(), calls.begin(), calls.end());
  return true;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialMarker(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  }
  return 0;
}

}  // namespace

const char* ToolCallFormatName(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kJson: return "json";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

bool ParseToolCallFormat(const std::string& name, ToolCallFormat* out) {
  for (ToolCallFormat f : {ToolCallFormat::kJson, ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                           ToolCallFormat::kMistral}) {
    if (name == ToolCallFormatName(f)) {
      *out = f;
      return true;
    }
  }
  if (name == "qwen" || name == "qwen3") {
    *out = ToolCallFormat::kHermes;
    return true;
  }
  if (name == "llama3" || name == "llama4_json") {
    *out = ToolCallFormat::kLlama3;
    return true;
  }
  return false;
}

ToolCallFormat DetectToolCallFormat(const std::string& t) {
  if (Has(t, kHermesOpen)) return ToolCallFormat::kHermes;
  if (Has(t, kMistralMarker)) return ToolCallFormat::kMistral;
  if (Has(t, "<|start_header_id|>") && Has(t, "tool")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kJson;
}

Status ParseToolRequest(const OJson& body, ToolRequest* out) {
  *out = ToolRequest{};
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return InvalidArgument("tools: 'tools' must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const OJson& t = (*tools)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object()) return InvalidArgument(fmt::format("tools: {} must be an object", where));
      for (const auto& [k, v] : t.items()) {
        if (k != "type" && k != "function") return InvalidArgument(fmt::format("tools: {} has an unknown field '{}'", where, k));
      }
      if (auto ty = t.find("type"); ty != t.end() && *ty != "function") {
        return InvalidArgument(fmt::format("tools: {}.type must be \"function\"", where));
      }
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return InvalidArgument(fmt::format("tools: {} needs a 'function' object", where));
      for (const auto& [k, v] : fn->items()) {
        if (k != "name" && k != "description" && k != "parameters" && k != "strict") {
          return InvalidArgument(fmt::format("tools: {}.function has an unknown field '{}'", where, k));
        }
      }
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
        return InvalidArgument(fmt::format("tools: {}.function.name must be 1-64 letters, digits, '_' or '-'", where));
      }
      if (auto d = fn->find("description"); d != fn->end() && !d->is_string() && !d->is_null()) {
        return InvalidArgument(fmt::format("tools: {}.function.description must be a string", where));
      }
      if (auto s = fn->find("strict"); s != fn->end() && !s->is_boolean() && !s->is_null()) {
        return InvalidArgument(fmt::format("tools: {}.function.strict must be true or false", where));
      }
      ToolSpec spec;
      spec.name = name->get<std::string>();
      for (const ToolSpec& other : out->tools) {
        if (other.name == spec.name) return InvalidArgument(fmt::format("tools: two tools are named '{}'", spec.name));
      }
      auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null()) {
        if (!params->is_object()) return InvalidArgument(fmt::format("tools: {}.function.parameters must be a JSON schema object", where));
        spec.parameters = *params;
      } else {
        spec.parameters = OJson{{"type", "object"}};
      }
      out->tools.push_back(std::move(spec));
    }
    if (!out->tools.empty()) out->tools_json = *tools;
  }
  out->choice = out->tools.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        out->choice = ToolRequest::Choice::kNone;
      } else if (c == "auto") {
        out->choice = out->tools.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
      } else if (c == "required") {
        out->choice = ToolRequest::Choice::kRequired;
      } else {
        return InvalidArgument("tool_choice: 'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
      }
    } else if (choice->is_object()) {
      auto fn = choice->find("function");
      auto ty = choice->find("type");
      if (ty == choice->end() || *ty != "function" || fn == choice->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string()) {
        return InvalidArgument("tool_choice: a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      out->choice = ToolRequest::Choice::kNamed;
      out->named = (*fn)["name"].get<std::string>();
      bool found = false;
      for (const ToolSpec& t : out->tools) found |= t.name == out->named;
      if (!found) return InvalidArgument(fmt::format("tool_choice: no tool named '{}' in 'tools'", out->named));
    } else {
      return InvalidArgument("tool_choice: 'tool_choice' must be a string or an object");
    }
    if ((out->choice == ToolRequest::Choice::kRequired) && out->tools.empty()) {
      return InvalidArgument("tool_choice: \"required\" needs 'tools'");
    }
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return InvalidArgument("parallel_tool_calls: 'parallel_tool_calls' must be true or false");
    out->parallel = p->get<bool>();
  }
  return Status::Ok();
}

StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const ToolRequest& req) {
  std::string rules;
  std::vector<std::string> calls;  // one alternative per allowed tool
  for (size_t i = 0; i < req.tools.size(); ++i) {
    const ToolSpec& t = req.tools[i];
    if (req.choice == ToolRequest::Choice::kNamed && t.name != req.named) continue;
    auto args = JsonSchemaToGbnfExpr(t.parameters, fmt::format("tool{}-", i), &rules);
    if (!args.ok()) return InvalidArgument(fmt::format("tools: '{}': {}", t.name, args.status().message()));
    if (format == ToolCallFormat::kJson && req.choice == ToolRequest::Choice::kNamed) {
      // vLLM's named choice: the reply is the arguments object itself.
      return fmt::format("root ::= {}\n{}{}", *args, rules, JsonGbnfPrimitives());
    }
    const char* args_key = format == ToolCallFormat::kHermes || format == ToolCallFormat::kMistral ? "arguments" : "parameters";
    const std::string head = fmt::format("{{\"name\": {}, \"{}\": ", DumpJson(json(t.name)), args_key);
    calls.push_back(fmt::format("{} {} \"}}\"", GbnfLiteral(head), *args));
  }
  if (calls.empty()) return InvalidArgument("tool_choice: no tool to call");
  std::string call = "tool-call ::= ";
  for (size_t i = 0; i < calls.size(); ++i) call += (i ? " | " : "") + calls[i];
  std::string root;
  const bool many = req.parallel;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = many ? R"(root ::= tool-block ( "\n" tool-block )*)" : "root ::= tool-block";
      root += "\ntool-block ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"";
      break;
    case ToolCallFormat::kLlama3:
      root = "root ::= tool-call";  // Llama 3.1 calls one function per reply
      break;
    case ToolCallFormat::kMistral:
      root = many ? R"(root ::= "[TOOL_CALLS] [" tool-call ( ", " tool-call )* "]")" : R"(root ::= "[TOOL_CALLS] [" tool-call "]")";
      break;
    case ToolCallFormat::kJson:
      root = many ? R"(root ::= "[" tool-call ( ", " tool-call )* "]")" : R"(root ::= "[" tool-call "]")";
      break;
  }
  return root + "\n" + call + "\n" + rules + JsonGbnfPrimitives();
}

ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text, uint64_t seed) {
  ParsedReply out;
  switch (format) {
    case ToolCallFormat::kHermes: {
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t open = text.find(kHermesOpen, pos);
        if (open == std::string::npos) break;
        const size_t body = open + std::strlen(kHermesOpen);
        const size_t close = text.find(kHermesClose, body);
        const std::string inner = Trim(text.substr(body, close == std::string::npos ? std::string::npos : close - body));
        const size_t end = close == std::string::npos ? text.size() : close + std::strlen(kHermesClose);
        std::vector<ToolCall> calls;
        out.content += text.substr(pos, open - pos);
        if (CallsFromText(inner, &calls)) {
          out.calls.insert(out.calls.end(), calls.begin(), calls.end());
        } else {
          out.content += text.substr(open, end - open);  // not a call after all
        }
        pos = end;
      }
      if (pos < text.size()) out.content += text.substr(pos);
      break;
    }
    case ToolCallFormat::kMistral: {
      const size_t m = text.find(kMistralMarker);
      if (m == std::string::npos || !CallsFromText(Trim(text.substr(m + std::strlen(kMistralMarker))), &out.calls)) {
        out.content = text;
      } else {
        out.content = text.substr(0, m);
      }
      break;
    }
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kJson: {
      std::string t = Trim(text);
      if (t.rfind(kPythonTag, 0) == 0) t = Trim(t.substr(std::strlen(kPythonTag)));
      bool ok = !t.empty() && (t[0] == '{' || t[0] == '[') && CallsFromText(t, &out.calls);
      if (!ok && format == ToolCallFormat::kLlama3 && !t.empty() && t[0] == '{') {
        // Llama 3.2 may write several calls separated by ';'.
        size_t start = 0;
        std::vector<ToolCall> calls;
        ok = true;
        while (ok && start < t.size()) {
          size_t semi = t.find(';', start);
          std::string part = Trim(t.substr(start, semi == std::string::npos ? std::string::npos : semi - start));
          ok = !part.empty() && CallsFromText(part, &calls);
          start = semi == std::string::npos ? t.size() : semi + 1;
        }
        if (ok) out.calls = std::move(calls);
      }
      if (!ok) {
        out.calls.clear();
        out.content = text;
      }
      break;
    }
  }
  for (size_t i = 0; i < out.calls.size(); ++i) out.calls[i].id = ToolCallId(format, seed, i);
  if (!out.calls.empty() && Trim(out.content).empty()) out.content.clear();
  return out;
}

std::string ToolCallStream::Feed(const std::string& text) {
  held_ += text;
  if (holding_) return "";
  std::string marker;
  switch (format_) {
    case ToolCallFormat::kHermes: marker = kHermesOpen; break;
    case ToolCallFormat::kMistral: marker = kMistralMarker; break;
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kJson: {
      if (started_) {
        std::string out = std::move(held_);
        held_.clear();
        return out;
      }
      const std::string t = Trim(held_);
      if (t.empty()) return "";  // leading white space: wait
      const std::string tag = kPythonTag;
      if (t[0] == '{' || t[0] == '[' || t.rfind(tag, 0) == 0) {
        holding_ = true;  // a call starts the reply
        return "";
      }
      if (tag.compare(0, std::min(t.size(), tag.size()), t, 0, std::min(t.size(), tag.size())) == 0) return "";
      started_ = true;
      std::string out = std::move(held_);
      held_.clear();
      return out;
    }
  }
  const size_t at = held_.find(marker);
  if (at != std::string::npos) {
    holding_ = true;
    std::string out = held_.substr(0, at);
    held_.erase(0, at);
    return out;
  }
  const size_t keep = PartialMarker(held_, marker);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ParsedReply ToolCallStream::Finish() {
  ParsedReply r = holding_ ? ParseToolCalls(format_, held_, seed_) : ParsedReply{held_, {}};
  held_.clear();
  return r;
}

json ToolCallJson(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace infera::server
