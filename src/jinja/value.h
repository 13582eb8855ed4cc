// The values a Jinja template computes with, modelled on the Python objects
// Jinja2 renders (HF transformers' chat templates are run by Jinja2): none,
// bool, int, float, str, list, dict (insertion-ordered, string keys),
// callables (macros, globals such as range or namespace) and namespace
// objects whose attributes `set ns.x = ...` may assign. Undefined is the value
// of a missing variable, key or attribute: it prints as "", is falsy and
// iterates as empty, as Jinja2's default Undefined does.
//
// Lists, dicts and callables are shared by reference (copying a Value is
// cheap); only namespaces are ever mutated. Not thread-safe: one render owns
// the values it makes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace infera::jinja {

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `pos` or named `name`, else nullptr.
  const Value* Get(size_t pos, std::string_view name) const;
};

class Interpreter;
using NativeFunction = std::function<Value(Interpreter&, const CallArgs&)>;

// A template error; the message names what went wrong (Jinja2's wording where
// it has one). Thrown inside the jinja module only, returned as a Status at
// its boundary (template.h).
class JinjaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throw JinjaError(msg); with a line, "line N: msg" (the lexer's, parser's
// and interpreter's errors name the template line).
[[noreturn]] void Fail(const std::string& msg);
[[noreturn]] void Fail(int line, const std::string& msg);

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value Str(std::string s);
  static Value List(ValueList items = {});
  // A list that prints as a Python tuple: (1, 2).
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict items = {});
  static Value Namespace(ValueDict items = {});
  static Value Callable(std::string name, NativeFunction fn);
  // nlohmann JSON (ordered or not) -> Value; objects keep their key order.
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool AsBool() const { return b_; }
  int64_t AsInt() const;    // bool/int/float -> int (truncating)
  double AsDouble() const;  // bool/int/float -> double
  const std::string& str() const { return *s_; }
  const ValueList& list() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  ValueDict& mutable_dict() { return *dict_; }
  const std::string& callable_name() const { return callable_->name; }
  const NativeFunction& function() const { return callable_->fn; }

  // Dict / namespace lookup; nullptr if absent.
  const Value* Find(std::string_view key) const;
  // Python truthiness.
  bool Truthy() const;
  // str(value) as Jinja2 prints it: None, True, 1.5, ['a', 1], {'k': 'v'}.
  std::string ToString() const;
  // repr(value): strings quoted.
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: none),
  // as transformers' tojson filter; sort_keys orders dict keys.
  std::string ToJson(int indent = -1, bool sort_keys = false) const;
  // Python ==.
  bool Equals(const Value& other) const;
  // Type name for error messages ("str", "int", "list", ...).
  const char* TypeName() const;

 private:
  struct CallableImpl {
    std::string name;
    NativeFunction fn;
  };
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const CallableImpl> callable_;
};

// Python's repr of a float: shortest round-trip digits, ".0" on whole numbers,
// exponent form outside [1e-4, 1e16).
std::string FormatFloat(double d);

// UTF-8 text as code points and back (invalid bytes become U+FFFD).
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);

}  // namespace infera::jinja
