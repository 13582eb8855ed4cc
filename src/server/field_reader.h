// Internal to the OpenAI request parser (openai_request.cc and
// chat_messages.cc): reading a request object's fields, and the chat
// messages of a chat request. Not part of the server's API.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace infera::server {

// Reads optional fields of a request object, keeping the first error.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& obj, ApiError* err) : obj_(obj), err_(err) {}
  bool ok() const { return ok_; }

  // The field, or nullptr if absent or null.
  const nlohmann::json* Find(const char* name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool Fail(const std::string& param, const std::string& message) {
    if (ok_) {
      err_->status = 400;
      err_->message = message;
      err_->param = param;
      err_->code = "invalid_value";
      ok_ = false;
    }
    return false;
  }

  void Number(const char* name, float* out, double lo, double hi) {
    const nlohmann::json* v = Find(name);
    if (v == nullptr) return;
    if (!v->is_number()) {
      Fail(name, fmt::format("'{}' must be a number", name));
      return;
    }
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      Fail(name, fmt::format("'{}' must be a number in [{}, {}]", name, lo, hi));
      return;
    }
    *out = static_cast<float>(d);
  }

  template <typename Int>
  bool Integer(const char* name, Int* out, int64_t lo, int64_t hi) {
    const nlohmann::json* v = Find(name);
    if (v == nullptr) return false;
    if (!v->is_number_integer()) return Fail(name, fmt::format("'{}' must be an integer", name));
    int64_t x;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                         : static_cast<int64_t>(u);
    } else {
      x = v->get<int64_t>();
    }
    if (x < lo || x > hi) return Fail(name, fmt::format("'{}' must be an integer in [{}, {}]", name, lo, hi));
    *out = static_cast<Int>(x);
    return true;
  }

  bool Bool(const char* name, bool* out) {
    const nlohmann::json* v = Find(name);
    if (v == nullptr) return false;
    if (!v->is_boolean()) return Fail(name, fmt::format("'{}' must be a boolean", name));
    *out = v->get<bool>();
    return true;
  }

  void String(const char* name, std::string* out) {
    const nlohmann::json* v = Find(name);
    if (v == nullptr) return;
    if (!v->is_string()) {
      Fail(name, fmt::format("'{}' must be a string", name));
      return;
    }
    *out = v->get<std::string>();
  }

 private:
  const nlohmann::json& obj_;
  ApiError* err_;
  bool ok_ = true;
};

// A chat request's messages (with obody, the same body with its key order
// kept: tool calls' arguments reach the template as written), through the
// chat template (the request's own when trusted) into out->prompts, with the
// tools and their grammar (treq). On failure returns false with r's error.
bool ParseMessages(const nlohmann::ordered_json& obody, const ToolRequest& treq, const ParseContext& ctx,
                   CompletionSpec* out, FieldReader* r);

}  // namespace infera::server
