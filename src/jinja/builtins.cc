#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace infera::jinja {
namespace {

[[noreturn]] void Fail(const std::string& msg) { throw JinjaError(msg); }

bool IsPyWhitespace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

Value Arg(const CallArgs& a, size_t pos, const char* name, const Value& fallback) {
  const Value* v = a.Get(pos, name);
  return v ? *v : fallback;
}

const std::string& StrArg(const CallArgs& a, size_t pos, const char* name, const char* what) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || !v->is_string()) Fail(std::string(what) + ": argument '" + name + "' must be a string");
  return v->str();
}

char AsciiUpper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool IsAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (static_cast<unsigned char>(c) >= 0x80);
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
Value AttrPath(const Value& v, const Value& attr) {
  if (attr.kind() == Value::Kind::kInt) return GetItem(v, attr);
  if (!attr.is_string()) Fail("attribute name must be a string");
  Value cur = v;
  size_t pos = 0;
  const std::string& path = attr.str();
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_undefined()) return cur;
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits && cur.is_list() ? GetItem(cur, Value::Int(std::stoll(part))) : GetItem(cur, Value::Str(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

int CompareForSort(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_number() && b.is_number()) return a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
  if (a.is_string() && b.is_string()) {
    return case_sensitive ? a.str().compare(b.str()) : Lower(a.str()).compare(Lower(b.str()));
  }
  Fail(std::string("'<' not supported between instances of '") + a.TypeName() + "' and '" + b.TypeName() + "'");
}

// select / reject / selectattr / rejectattr: args[first] names the test.
ValueList SelectItems(Interpreter& in, const Value& seq, const CallArgs& args, bool by_attr, bool keep) {
  size_t first = 0;
  Value attr;
  if (by_attr) {
    if (args.positional.empty()) Fail("selectattr / rejectattr need an attribute name");
    attr = args.positional[0];
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first) {
    if (!args.positional[first].is_string()) Fail("the test name must be a string");
    test = args.positional[first].str();
    test_args.positional.assign(args.positional.begin() + first + 1, args.positional.end());
  }
  ValueList out;
  for (const Value& item : Iterate(seq)) {
    in.CountStep();
    const Value subject = by_attr ? AttrPath(item, attr) : item;
    const bool pass = test.empty() ? subject.Truthy() : ApplyTest(in, test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return out;
}

std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t pos = 0;
  bool is_first = true;
  while (pos <= s.size()) {
    size_t nl = s.find('\n', pos);
    const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if ((!is_first || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    is_first = false;
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

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

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) Fail("an undefined value has no attribute '" + name + "'");
  if (obj.is_mapping()) {
    const Value* v = obj.Find(name);
    return v ? *v : Value();
  }
  return Value();
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) Fail("an undefined value cannot be indexed");
  if (obj.is_mapping()) {
    if (!key.is_string()) return Value();
    const Value* v = obj.Find(key.str());
    return v ? *v : Value();
  }
  if ((obj.is_list() || obj.is_string()) && key.is_number() && key.kind() != Value::Kind::kFloat) {
    int64_t i = key.AsInt();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.list()[static_cast<size_t>(i)] : Value();
    }
    const std::u32string cps = DecodeUtf8(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value::Str(EncodeUtf8(cps.substr(static_cast<size_t>(i), 1))) : Value();
  }
  return Value();
}

Value Slice(const Value& obj, const Value* start, const Value* stop, const Value* step_v) {
  const auto as_index = [](const Value* v, const char* what) -> std::optional<int64_t> {
    if (v == nullptr || v->is_none()) return std::nullopt;
    if (!v->is_number() || v->kind() == Value::Kind::kFloat) Fail(std::string("slice ") + what + " must be an integer");
    return v->AsInt();
  };
  const int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) Fail("slice step cannot be zero");
  std::u32string cps;
  const bool is_str = obj.is_string();
  if (is_str) {
    cps = DecodeUtf8(obj.str());
  } else if (!obj.is_list()) {
    Fail(std::string("'") + obj.TypeName() + "' object is not subscriptable");
  }
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list().size());
  const auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(as_index(start, "start"), step > 0 ? 0 : n - 1);
  const int64_t e = clamp(as_index(stop, "stop"), step > 0 ? n : -1);
  std::u32string s_out;
  ValueList l_out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (is_str) {
      s_out += cps[static_cast<size_t>(i)];
    } else {
      l_out.push_back(obj.list()[static_cast<size_t>(i)]);
    }
  }
  return is_str ? Value::Str(EncodeUtf8(s_out)) : Value::List(std::move(l_out));
}

ValueList Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, _] : v.dict()) keys.push_back(Value::Str(k));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : DecodeUtf8(v.str())) chars.push_back(Value::Str(EncodeUtf8(std::u32string(1, c))));
      return chars;
    }
    default: Fail(std::string("'") + v.TypeName() + "' object is not iterable");
  }
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) Fail(std::string("'in <string>' requires string as left operand, not ") + item.TypeName());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list().begin(), container.list().end(), [&](const Value& e) { return e.Equals(item); });
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return item.is_string() && container.Find(item.str()) != nullptr;
    default: Fail(std::string("argument of type '") + container.TypeName() + "' is not iterable");
  }
}

Value ApplyFilter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  in.CountStep();
  const Value none = Value::None();
  // String filters convert their input with str(), as Jinja2's soft_str does.
  const auto need_string = [&]() { return v.ToString(); };
  if (name == "default" || name == "d") {
    const bool boolean = Arg(a, 1, "boolean", Value::Bool(false)).Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(a, 0, "default_value", Value::Str(""));
    return v;
  }
  if (name == "trim") return Value::Str(PyStrip(need_string(), a.Get(0, "chars"), true, true));
  if (name == "upper") return Value::Str(Upper(need_string()));
  if (name == "lower") return Value::Str(Lower(need_string()));
  if (name == "title") return Value::Str(Title(need_string()));
  if (name == "capitalize") return Value::Str(Capitalize(need_string()));
  if (name == "string") return v.is_string() ? v : Value::Str(v.ToString());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value::Str(HtmlEscape(v.ToString()));
  if (name == "length" || name == "count") {
    if (v.is_undefined()) return Value::Int(0);
    if (v.is_string()) return Value::Int(static_cast<int64_t>(DecodeUtf8(v.str()).size()));
    if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
    if (v.is_mapping()) return Value::Int(static_cast<int64_t>(v.dict().size()));
    Fail(std::string("object of type '") + v.TypeName() + "' has no len()");
  }
  if (name == "list") {
    if (v.is_undefined()) return Value::List();
    return Value::List(Iterate(v));
  }
  if (name == "first" || name == "last") {
    ValueList items = Iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string cps = DecodeUtf8(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::Str(EncodeUtf8(cps));
    }
    ValueList items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    const Value sep = Arg(a, 0, "d", Value::Str(""));
    const Value* attr = a.Get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(v)) {
      if (!first) out += sep.ToString();
      first = false;
      out += (attr && !attr->is_none() ? AttrPath(item, *attr) : item).ToString();
      if (out.size() > in.limits().max_output_bytes) Fail("join: result too long");
    }
    return Value::Str(std::move(out));
  }
  if (name == "replace") {
    const std::string& from = StrArg(a, 0, "old", "replace");
    const std::string& to = StrArg(a, 1, "new", "replace");
    const Value* count = a.Get(2, "count");
    return Value::Str(Replace(v.ToString(), from, to, count && !count->is_none() ? count->AsInt() : -1,
                              in.limits().max_output_bytes));
  }
  if (name == "tojson") {
    const Value indent = Arg(a, 0, "indent", none);
    const Value sort_keys = Arg(a, 1, "sort_keys", Value::Bool(false));
    if (!indent.is_none() && !(indent.is_number() && indent.kind() != Value::Kind::kFloat)) {
      Fail("tojson: indent must be an integer");
    }
    const int ind = indent.is_none() ? -1 : static_cast<int>(std::clamp<int64_t>(indent.AsInt(), 0, 64));
    return Value::Str(v.ToJson(ind, sort_keys.Truthy()));
  }
  if (name == "items") {
    if (!v.is_mapping()) Fail(std::string("items: expected a mapping, got ") + v.TypeName());
    ValueList out;
    for (const auto& [k, e] : v.dict()) out.push_back(Value::Tuple({Value::Str(k), e}));
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) Fail(std::string("dictsort: expected a mapping, got ") + v.TypeName());
    const bool case_sensitive = Arg(a, 0, "case_sensitive", Value::Bool(false)).Truthy();
    const Value by = Arg(a, 1, "by", Value::Str("key"));
    const bool reverse = Arg(a, 2, "reverse", Value::Bool(false)).Truthy();
    const int idx = by.is_string() && by.str() == "value" ? 1 : 0;
    ValueList out;
    for (const auto& [k, e] : v.dict()) out.push_back(Value::Tuple({Value::Str(k), e}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      const int c = CompareForSort(x.list()[idx], y.list()[idx], case_sensitive);
      return reverse ? c > 0 : c < 0;
    });
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    const bool reverse = Arg(a, 0, "reverse", Value::Bool(false)).Truthy();
    const bool case_sensitive = Arg(a, 1, "case_sensitive", Value::Bool(false)).Truthy();
    const Value* attr = a.Get(2, "attribute");
    ValueList items = Iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value& kx = attr && !attr->is_none() ? AttrPath(x, *attr) : x;
      const Value& ky = attr && !attr->is_none() ? AttrPath(y, *attr) : y;
      const int c = CompareForSort(kx, ky, case_sensitive);
      return reverse ? c > 0 : c < 0;
    });
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& item : Iterate(v)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.Equals(item); })) out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  if (name == "min" || name == "max") {
    ValueList items = Iterate(v);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& item : items) {
      const int c = CompareForSort(item, best, false);
      if (name == "min" ? c < 0 : c > 0) best = item;
    }
    return best;
  }
  if (name == "sum") {
    const Value* attr = a.Get(0, "attribute");
    Value total = Arg(a, 1, "start", Value::Int(0));
    for (const Value& item : Iterate(v)) {
      const Value x = attr && !attr->is_none() ? AttrPath(item, *attr) : item;
      if (!x.is_number() || !total.is_number()) Fail("sum: items must be numbers");
      total = x.kind() == Value::Kind::kFloat || total.kind() == Value::Kind::kFloat
                  ? Value::Float(total.AsDouble() + x.AsDouble())
                  : Value::Int(total.AsInt() + x.AsInt());
    }
    return total;
  }
  if (name == "int") {
    const Value dflt = Arg(a, 0, "default", Value::Int(0));
    if (v.is_number()) return Value::Int(v.AsInt());
    if (v.is_string()) {
      const std::string s = PyStrip(v.str(), nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::Int(x);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value::Int(static_cast<int64_t>(d));
    }
    return dflt;
  }
  if (name == "float") {
    const Value dflt = Arg(a, 0, "default", Value::Float(0));
    if (v.is_number()) return Value::Float(v.AsDouble());
    if (v.is_string()) {
      const std::string s = PyStrip(v.str(), nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(d);
    }
    return dflt;
  }
  if (name == "abs") {
    if (!v.is_number()) Fail(std::string("bad operand type for abs(): '") + v.TypeName() + "'");
    return v.kind() == Value::Kind::kFloat ? Value::Float(std::fabs(v.AsDouble())) : Value::Int(std::llabs(v.AsInt()));
  }
  if (name == "round") {
    if (!v.is_number()) Fail("round: expected a number");
    const int64_t precision = Arg(a, 0, "precision", Value::Int(0)).AsInt();
    const Value method = Arg(a, 1, "method", Value::Str("common"));
    const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -15, 15)));
    double x = v.AsDouble() * scale;
    const std::string m = method.is_string() ? method.str() : "common";
    x = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);  // half to even, as Python
    return Value::Float(x / scale);
  }
  if (name == "indent") {
    const Value width = Arg(a, 0, "width", Value::Int(4));
    const bool first = Arg(a, 1, "first", Value::Bool(false)).Truthy();
    const bool blank = Arg(a, 2, "blank", Value::Bool(false)).Truthy();
    const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::clamp<int64_t>(width.AsInt(), 0, 256)), ' ');
    return Value::Str(Indent(v.ToString(), pad, first, blank));
  }
  if (name == "center") {
    const std::string s = v.ToString();
    const int64_t width = std::min<int64_t>(Arg(a, 0, "width", Value::Int(80)).AsInt(), 1 << 20);
    const int64_t len = static_cast<int64_t>(DecodeUtf8(s).size());
    if (len >= width) return Value::Str(s);
    const int64_t total = width - len, left = total / 2 + (total & width & 1);
    return Value::Str(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
  }
  if (name == "wordcount") return Value::Int(static_cast<int64_t>(Split(v.ToString(), nullptr, -1).size()));
  if (name == "select") return Value::List(SelectItems(in, v, a, false, true));
  if (name == "reject") return Value::List(SelectItems(in, v, a, false, false));
  if (name == "selectattr") return Value::List(SelectItems(in, v, a, true, true));
  if (name == "rejectattr") return Value::List(SelectItems(in, v, a, true, false));
  if (name == "map") {
    ValueList out;
    const Value* attr = nullptr;
    for (const auto& [k, val] : a.keyword) {
      if (k == "attribute") attr = &val;
    }
    if (attr != nullptr) {
      const Value* dflt = nullptr;
      for (const auto& [k, val] : a.keyword) {
        if (k == "default") dflt = &val;
      }
      for (const Value& item : Iterate(v)) {
        Value x = AttrPath(item, *attr);
        out.push_back(x.is_undefined() && dflt ? *dflt : x);
      }
      return Value::List(std::move(out));
    }
    if (a.positional.empty() || !a.positional[0].is_string()) Fail("map: expected a filter name or attribute=");
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : Iterate(v)) out.push_back(ApplyFilter(in, a.positional[0].str(), item, rest));
    return Value::List(std::move(out));
  }
  if (name == "attr") {
    return GetAttr(v, StrArg(a, 0, "name", "attr"));
  }
  if (name == "batch") {
    const int64_t size = Arg(a, 0, "linecount", Value::Int(1)).AsInt();
    if (size <= 0) Fail("batch: size must be positive");
    ValueList out, cur;
    for (const Value& item : Iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == size) {
        out.push_back(Value::List(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) out.push_back(Value::List(std::move(cur)));
    return Value::List(std::move(out));
  }
  Fail("unknown filter '" + name + "'");
}

bool ApplyTest(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  in.CountStep();
  const auto other = [&]() -> const Value& {
    const Value* o = a.Get(0, "other");
    if (o == nullptr) Fail("test '" + name + "' needs an argument");
    return *o;
  };
  const auto compare = [&](const char* op) {
    const Value& o = other();
    if (v.is_number() && o.is_number()) {
      const double x = v.AsDouble(), y = o.AsDouble();
      return op[0] == '<' ? (op[1] ? x <= y : x < y) : (op[1] ? x >= y : x > y);
    }
    if (v.is_string() && o.is_string()) {
      const int c = v.str().compare(o.str());
      return op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
    }
    Fail(std::string("'") + op + "' not supported between '" + v.TypeName() + "' and '" + o.TypeName() + "'");
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Value::Kind::kBool;
  if (name == "true") return v.kind() == Value::Kind::kBool && v.AsBool();
  if (name == "false") return v.kind() == Value::Kind::kBool && !v.AsBool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == Value::Kind::kInt;
  if (name == "float") return v.kind() == Value::Kind::kFloat;
  if (name == "mapping") return v.kind() == Value::Kind::kDict;
  if (name == "iterable") return v.is_list() || v.is_string() || v.kind() == Value::Kind::kDict || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_string() || v.kind() == Value::Kind::kDict;
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && Lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && Upper(v.str()) == v.str();
  if (name == "even" || name == "odd") {
    if (!v.is_number()) Fail("test '" + name + "' needs a number");
    return (v.AsInt() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value& o = other();
    if (!v.is_number() || !o.is_number() || o.AsInt() == 0) Fail("divisibleby needs non-zero numbers");
    return v.AsInt() % o.AsInt() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(other());
  if (name == "ne" || name == "!=") return !v.Equals(other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare("<");
  if (name == "le" || name == "<=") return compare("<=");
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(">");
  if (name == "ge" || name == ">=") return compare(">=");
  if (name == "in") return Contains(a.Get(0, "seq") ? *a.Get(0, "seq") : Value(), v);
  if (name == "sameas") {
    const Value& o = other();
    if (v.is_none() || v.kind() == Value::Kind::kBool || v.is_undefined()) return v.Equals(o) && v.kind() == o.kind();
    return v.Equals(o) && (v.is_list() || v.is_mapping() ? v.ToString() == o.ToString() : true);
  }
  Fail("unknown test '" + name + "'");
}

bool CallMethod(Interpreter& in, const Value& obj, const std::string& name, const CallArgs& a, Value* out) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      *out = Value::Str(PyStrip(s, a.Get(0, "chars"), name != "rstrip", name != "lstrip"));
    } else if (name == "upper") {
      *out = Value::Str(Upper(s));
    } else if (name == "lower") {
      *out = Value::Str(Lower(s));
    } else if (name == "title") {
      *out = Value::Str(Title(s));
    } else if (name == "capitalize") {
      *out = Value::Str(Capitalize(s));
    } else if (name == "startswith" || name == "endswith") {
      const Value* p = a.Get(0, "prefix");
      if (p == nullptr) Fail(name + "() takes an argument");
      ValueList options = p->is_list() ? p->list() : ValueList{*p};
      bool r = false;
      for (const Value& o : options) {
        if (!o.is_string()) Fail(name + "() argument must be a string or a tuple of strings");
        const std::string& x = o.str();
        r |= x.size() <= s.size() && (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                                          : s.compare(s.size() - x.size(), x.size(), x) == 0);
      }
      *out = Value::Bool(r);
    } else if (name == "split") {
      const Value* maxsplit = a.Get(1, "maxsplit");
      *out = Value::List(Split(s, a.Get(0, "sep"), maxsplit ? maxsplit->AsInt() : -1));
    } else if (name == "replace") {
      const Value* count = a.Get(2, "count");
      *out = Value::Str(Replace(s, StrArg(a, 0, "old", "replace"), StrArg(a, 1, "new", "replace"),
                                count ? count->AsInt() : -1, in.limits().max_output_bytes));
    } else if (name == "find" || name == "rfind" || name == "count" || name == "index") {
      const std::string& sub = StrArg(a, 0, "sub", name.c_str());
      if (name == "count") {
        int64_t n = 0;
        if (sub.empty()) {
          n = static_cast<int64_t>(DecodeUtf8(s).size()) + 1;
        } else {
          for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        }
        *out = Value::Int(n);
      } else {
        const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
        if (p == std::string::npos && name == "index") Fail("substring not found");
        *out = Value::Int(p == std::string::npos ? -1 : static_cast<int64_t>(DecodeUtf8(s.substr(0, p)).size()));
      }
    } else if (name == "join") {
      const Value* items = a.Get(0, "iterable");
      if (items == nullptr) Fail("join() takes an argument");
      std::string r;
      bool first = true;
      for (const Value& x : Iterate(*items)) {
        if (!x.is_string()) Fail("join(): sequence item is not a string");
        if (!first) r += s;
        first = false;
        r += x.str();
      }
      *out = Value::Str(std::move(r));
    } else if (name == "splitlines") {
      ValueList lines;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t nl = s.find_first_of("\r\n", pos);
        if (nl == std::string::npos) {
          lines.push_back(Value::Str(s.substr(pos)));
          break;
        }
        lines.push_back(Value::Str(s.substr(pos, nl - pos)));
        pos = nl + (s.compare(nl, 2, "\r\n") == 0 ? 2 : 1);
      }
      *out = Value::List(std::move(lines));
    } else if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
      bool r = !s.empty();
      for (char c : s) {
        const bool d = c >= '0' && c <= '9', al = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        const bool sp = c == ' ' || (c >= 9 && c <= 13);
        r &= name == "isdigit" ? d : name == "isalpha" ? al : name == "isspace" ? sp : (d || al);
      }
      *out = Value::Bool(r);
    } else {
      return false;
    }
    return true;
  }
  if (obj.kind() == Value::Kind::kDict) {
    if (name == "items") {
      *out = ApplyFilter(in, "items", obj, {});
    } else if (name == "keys") {
      *out = Value::List(Iterate(obj));
    } else if (name == "values") {
      ValueList vals;
      for (const auto& [k, v] : obj.dict()) vals.push_back(v);
      *out = Value::List(std::move(vals));
    } else if (name == "get") {
      const Value* key = a.Get(0, "key");
      if (key == nullptr) Fail("get() takes a key");
      const Value* v = key->is_string() ? obj.Find(key->str()) : nullptr;
      *out = v ? *v : Arg(a, 1, "default", Value::None());
    } else {
      const Value* v = obj.Find(name);
      if (v != nullptr && v->is_callable()) return false;  // a callable stored in the dict (loop.cycle)
      return false;
    }
    return true;
  }
  return false;
}

void AddGlobals(ValueDict* g) {
  g->emplace_back("range", Value::Callable("range", [](Interpreter& in, const CallArgs& a) {
                    if (a.positional.empty() || a.positional.size() > 3) Fail("range() takes 1 to 3 arguments");
                    for (const Value& v : a.positional) {
                      if (!v.is_number() || v.kind() == Value::Kind::kFloat) Fail("range() arguments must be integers");
                    }
                    int64_t start = 0, stop, step = 1;
                    if (a.positional.size() == 1) {
                      stop = a.positional[0].AsInt();
                    } else {
                      start = a.positional[0].AsInt();
                      stop = a.positional[1].AsInt();
                      if (a.positional.size() == 3) step = a.positional[2].AsInt();
                    }
                    if (step == 0) Fail("range() step must not be zero");
                    ValueList out;
                    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                      if (out.size() >= in.limits().max_sequence) Fail("range() too long");
                      out.push_back(Value::Int(i));
                    }
                    return Value::List(std::move(out));
                  }));
  const auto make_dict = [](bool ns) {
    return [ns](Interpreter&, const CallArgs& a) {
      ValueDict items;
      for (const Value& p : a.positional) {
        if (!p.is_mapping()) Fail(ns ? "namespace() takes keyword arguments or a dict" : "dict() takes a mapping");
        items.insert(items.end(), p.dict().begin(), p.dict().end());
      }
      for (const auto& [k, v] : a.keyword) {
        bool replaced = false;
        for (auto& [ek, ev] : items) {
          if (ek == k) {
            ev = v;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(k, v);
      }
      return ns ? Value::Namespace(std::move(items)) : Value::Dict(std::move(items));
    };
  };
  g->emplace_back("namespace", Value::Callable("namespace", make_dict(true)));
  g->emplace_back("dict", Value::Callable("dict", make_dict(false)));
  g->emplace_back("raise_exception", Value::Callable("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
                    const Value* msg = a.Get(0, "message");
                    throw JinjaError(msg ? msg->ToString() : std::string("raise_exception() was called"));
                  }));
  g->emplace_back("strftime_now", Value::Callable("strftime_now", [](Interpreter&, const CallArgs& a) {
                    const std::string& fmt = StrArg(a, 0, "format", "strftime_now");
                    const std::time_t now = std::time(nullptr);
                    std::tm tm{};
                    localtime_r(&now, &tm);
                    char buf[256];
                    const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                    return Value::Str(std::string(buf, n));
                  }));
}

}  // namespace infera::jinja
