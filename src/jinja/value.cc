#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace infera::jinja {

void Fail(const std::string& msg) { throw JinjaError(msg); }

void Fail(int line, const std::string& msg) {
  std::string text = "line ";
  text.append(std::to_string(line)).append(": ").append(msg);
  throw JinjaError(text);
}

const Value* CallArgs::Get(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return &positional[pos];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::Dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}
Value Value::Namespace(ValueDict items) {
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const CallableImpl>(CallableImpl{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u)) : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e));
      return Dict(std::move(items));
    }
    default: return None();  // binary / discarded: not produced by the JSON parser
  }
}

int64_t Value::AsInt() const {
  if (kind_ == Kind::kFloat) {
    if (!std::isfinite(d_) || std::fabs(d_) > 9.2e18) throw JinjaError("cannot convert float " + FormatFloat(d_) + " to int");
    return static_cast<int64_t>(d_);
  }
  return i_;
}
double Value::AsDouble() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }

const Value* Value::Find(std::string_view key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out.append(digits).append(exp + 1 - digits.size(), '0').append(".0");
      } else {
        out.append(digits, 0, exp + 1).append(1, '.').append(digits, exp + 1);
      }
    } else {
      out.append("0.").append(-exp - 1, '0').append(digits);
    }
  } else {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out.append(eb);
  }
  return out;
}

namespace {

std::string PyStrRepr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          *out += b;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void ToJsonImpl(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > 512) throw JinjaError("tojson: value nested too deeply");
  const auto newline = [&](int d) {
    *out += '\n';
    out->append(static_cast<size_t>(indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined: throw JinjaError("tojson: value is undefined");
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.AsBool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.AsInt()); return;
    case Value::Kind::kFloat: {
      const double d = v.AsDouble();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FormatFloat(d);
      return;
    }
    case Value::Kind::kString: JsonString(v.str(), out); return;
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      bool first = true;
      for (const Value& e : v.list()) {
        if (!first) *out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        ToJsonImpl(e, indent, sort_keys, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      *out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) *out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        JsonString(kv->first, out);
        *out += ": ";
        ToJsonImpl(kv->second, indent, sort_keys, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      *out += '}';
      return;
    }
    case Value::Kind::kCallable: throw JinjaError("tojson: a function is not JSON serializable");
  }
}

}  // namespace

std::string Value::Repr() const { return kind_ == Kind::kString ? PyStrRepr(*s_) : ToString(); }

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FormatFloat(d_);
    case Kind::kString: return *s_;
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        if (!first) out += ", ";
        first = false;
        out += PyStrRepr(k) + ": " + v.Repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kCallable: return "<function " + callable_->name + ">";
  }
  return "";
}

std::string Value::ToJson(int indent, bool sort_keys) const {
  std::string out;
  ToJsonImpl(*this, indent, sort_keys, 0, &out);
  return out;
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return AsDouble() == o.AsDouble();
    return i_ == o.i_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *s_ == *o.s_;
    case Kind::kList: {
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const Value* ov = o.Find(k);
        if (ov == nullptr || !v.Equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return dict_ == o.dict_;
    case Kind::kCallable: return callable_ == o.callable_;
    default: return false;
  }
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += n;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

}  // namespace infera::jinja
