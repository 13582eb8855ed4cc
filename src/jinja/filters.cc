// Jinja's filters (`value | name(args)`), with Jinja2's semantics.
#include <algorithm>
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/pystr.h"

namespace infera::jinja {
namespace {

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


}  // namespace infera::jinja
