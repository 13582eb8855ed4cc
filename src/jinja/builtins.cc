#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "jinja/pystr.h"

namespace infera::jinja {

Value Arg(const CallArgs& a, size_t pos, const char* name, const Value& fallback) {
  const Value* v = a.Get(pos, name);
  return v ? *v : fallback;
}

const std::string& StrArg(const CallArgs& a, size_t pos, const char* name, const char* what) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || !v->is_string()) Fail(std::string(what) + ": argument '" + name + "' must be a string");
  return v->str();
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
      return false;  // not a dict method: maybe a callable stored in the dict (loop.cycle)
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
