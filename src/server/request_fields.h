// Every request field of the OpenAI, vLLM and llama.cpp completion APIs,
// and what infera does with each: parses it (its meaning is implemented),
// accepts it as having no effect on the output, or refuses it (400 naming
// it) unless it holds its no-op value. A field in no API is refused too, as
// OpenAI refuses it: a misspelt `max_token` must not be silently dropped.
// docs/api.md's field table is this table (a unit test keeps them equal).
//
// Plain constant data; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace infera::server {

enum class FieldUse {
  kParsed,    // implemented: ParseCompletionRequest reads and checks it
  kNoEffect,  // cannot change the output (see `what`); only its type is checked
  kRefused,   // not implemented: 400 unless it holds its no-op value
};

// The value(s) with which a refused field asks for nothing.
enum class Noop {
  kNull,         // absent or null only
  kEmpty,        // "", [], {} (or null)
  kFalse,
  kTrue,
  kZero,         // 0 or false
  kOne,
  kNotPositive,  // any number <= 0 (llama.cpp's "off" for some samplers)
  kText,         // one of the strings in `noop_text` ('|'-separated)
};

// The JSON type a kNoEffect field must have.
enum class JsonKind { kString, kBool, kNumber, kInteger, kObject, kArray };

inline constexpr int kCompletions = 1;
inline constexpr int kChat = 2;
inline constexpr int kBothEndpoints = kCompletions | kChat;

struct RequestField {
  const char* name;
  const char* origin;  // "OpenAI", "vLLM", "llama.cpp" (the first that defines it)
  int endpoints;       // kCompletions, kChat or both
  FieldUse use;
  Noop noop;             // kRefused only
  const char* noop_text; // Noop::kText only
  JsonKind kind;         // kNoEffect only
  const char* what;      // what it asks for; for kNoEffect, why the output cannot change
};

// The whole table, in documentation order.
std::span<const RequestField> RequestFields();

// The entry for `name` on the chat or completions endpoint; null if unknown.
const RequestField* FindRequestField(std::string_view name, bool chat);

// Whether `v` is the no-op value of refused field `f`.
bool IsNoopValue(const RequestField& f, const nlohmann::json& v);

// How a field's no-op value reads in the documentation ("false", "null", ...).
std::string NoopDescription(const RequestField& f);

}  // namespace infera::server
