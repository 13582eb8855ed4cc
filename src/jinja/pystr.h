// Python's str semantics the Jinja builtins need (Jinja2 runs on Python):
// strip / split / replace / case changes. Case changes are ASCII-only.
// Internal to the jinja module.
#pragma once

#include <cstdint>
#include <string>

#include "jinja/value.h"

namespace infera::jinja {

bool IsPyWhitespace(char32_t c);
std::string Upper(std::string s);
std::string Lower(std::string s);
std::string Title(const std::string& s);       // str.title()
std::string Capitalize(const std::string& s);  // str.capitalize()
// str.replace(from, to, count) (count < 0: all); throws past `limit` bytes.
std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                    size_t limit);
// str.split(sep, maxsplit): sep null / None splits on white space.
ValueList Split(const std::string& s, const Value* sep, int64_t maxsplit);
// str.strip / lstrip / rstrip(chars) on code points.
std::string PyStrip(const std::string& s, const Value* chars, bool left, bool right);

}  // namespace infera::jinja
