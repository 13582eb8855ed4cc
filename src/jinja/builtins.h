// Jinja's filters, tests, methods of str / dict, and the globals chat
// templates use (range, namespace, dict, raise_exception, strftime_now), with
// the semantics Jinja2 and Python give them.
#pragma once

#include <string>

#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace infera::jinja {

// obj.name / obj[key]: a missing key or attribute is undefined; reading from
// an undefined value throws.
Value GetAttr(const Value& obj, const std::string& name);
Value GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on a list or string (null parts: absent).
Value Slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// The elements a for loop visits: list items, dict keys, string characters.
ValueList Iterate(const Value& v);
// `item in container`.
bool Contains(const Value& container, const Value& item);

Value ApplyFilter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args);
bool ApplyTest(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args);
// A method of a str, list or dict; false if `obj` has no method `name`.
bool CallMethod(Interpreter& in, const Value& obj, const std::string& name, const CallArgs& args, Value* out);
// range, namespace, dict, raise_exception, strftime_now.
void AddGlobals(ValueDict* globals);

// For builtins: the argument at `pos` or named `name`, else `fallback`; a
// string argument (throws JinjaError naming `what` if absent or not a string).
Value Arg(const CallArgs& a, size_t pos, const char* name, const Value& fallback);
const std::string& StrArg(const CallArgs& a, size_t pos, const char* name, const char* what);

}  // namespace infera::jinja
