#include "jinja/pystr.h"

namespace infera::jinja {
namespace {

char AsciiUpper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool IsAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (static_cast<unsigned char>(c) >= 0x80);
}


}  // namespace

bool IsPyWhitespace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string Upper(std::string s) {
  for (char& c : s) c = AsciiUpper(c);
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = AsciiLower(c);
  return s;
}
std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    const bool alpha = IsAlpha(c);
    c = alpha && !prev_alpha ? AsciiUpper(c) : AsciiLower(c);
    prev_alpha = alpha;
  }
  return out;
}
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                    size_t limit) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    const std::u32string cps = DecodeUtf8(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) out += EncodeUtf8(cps.substr(i, 1));
      if (out.size() > limit) Fail("replace: result too long");
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = (count >= 0 && n >= count) ? std::string::npos : s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    if (out.size() > limit) Fail("replace: result too long");
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

// Python str.split(sep=None / sep, maxsplit).
ValueList Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  ValueList out;
  if (sep == nullptr || sep->is_none()) {
    size_t i = 0;
    int64_t n = 0;
    while (true) {
      while (i < s.size() && (s[i] == ' ' || (s[i] >= 9 && s[i] <= 13))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && n >= maxsplit) {
        size_t e = s.size();
        while (e > i && (s[e - 1] == ' ' || (s[e - 1] >= 9 && s[e - 1] <= 13))) --e;
        out.push_back(Value::Str(s.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !(s[j] == ' ' || (s[j] >= 9 && s[j] <= 13))) ++j;
      out.push_back(Value::Str(s.substr(i, j - i)));
      ++n;
      i = j;
    }
    return out;
  }
  if (!sep->is_string() || sep->str().empty()) Fail("split: empty or non-string separator");
  const std::string& d = sep->str();
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(Value::Str(s.substr(pos, f - pos)));
    pos = f + d.size();
    ++n;
  }
  out.push_back(Value::Str(s.substr(pos)));
  return out;
}

// Reads a dotted attribute path ("function.name") or an integer index.

std::string PyStrip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string cps = DecodeUtf8(s);
  std::u32string set;
  const bool custom = chars != nullptr && !chars->is_none() && !chars->is_undefined();
  if (custom) {
    if (!chars->is_string()) Fail("strip: chars must be a string");
    set = DecodeUtf8(chars->str());
  }
  const auto strip_it = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : IsPyWhitespace(c); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  if (b == 0 && e == cps.size()) return s;
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}


}  // namespace infera::jinja
