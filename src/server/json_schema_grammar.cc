#include "server/json_schema_grammar.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "base/json.h"
#include "sampling/grammar.h"

namespace infera::server {

// Ordered: a schema's properties are generated in the order it gives them
// (as OpenAI's structured outputs keep them).
using OrderedJson = nlohmann::ordered_json;

namespace {

constexpr int kMaxRepeat = 1000;  // the GBNF parser's bound on {m,n}

const char kPrimitives[] = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-number ::= json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
)";


class Converter {
 public:
  explicit Converter(const OrderedJson& root, std::string prefix = "") : root_(root), prefix_(std::move(prefix)) {}

  StatusOr<std::string> Run() {
    ASSIGN_OR_RETURN(std::string top, Visit(root_, "#"));
    std::string out = "root ::= " + top + "\n" + kPrimitives;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

  // The top expression; the helper rules go to *rules (no primitives).
  StatusOr<std::string> RunExpr(std::string* rules) {
    ASSIGN_OR_RETURN(std::string top, Visit(root_, "#"));
    for (const auto& [name, body] : rules_) *rules += name + " ::= " + body + "\n";
    return top;
  }

 private:
  Status Unsupported(const std::string& path, const std::string& what) const {
    return InvalidArgument(fmt::format("JSON schema at {}: {}", path, what));
  }

  std::string NewRule(const std::string& body) {
    const std::string name = fmt::format("{}s{}", prefix_, rules_.size());
    rules_.emplace_back(name, body);
    return name;
  }

  // The GBNF expression (a rule name or a group) for schema `s` at `path`.
  StatusOr<std::string> Visit(const OrderedJson& s, const std::string& path) {
    if (++depth_ > 64) return Unsupported(path, "nested too deeply");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return Unsupported(path, "'false' accepts nothing");
    }
    if (!s.is_object()) return Unsupported(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
        "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
        "minimum", "exclusiveMinimum", "title", "description", "default", "examples", "$schema", "$id",
        "$comment", "format", "strict", "name", "schema", "propertyNames"};
    for (const auto& [k, v] : s.items()) {
      if (!kKnown.count(k)) return Unsupported(path, fmt::format("keyword '{}' is not supported", k));
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      static const std::set<std::string> kBeside = {"$ref",   "$defs", "definitions", "title",
                                                    "description", "$schema", "$id", "$comment"};
      for (const auto& [k, v] : s.items()) {
        if (!kBeside.count(k)) return Unsupported(path, fmt::format("$ref beside '{}' is not supported", k));
      }
      return Ref(it->is_string() ? it->get<std::string>() : "", path);
    }
    if (auto it = s.find("const"); it != s.end()) return GbnfLiteral(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Unsupported(path, "'enum' must be a non-empty list");
      std::string alts;
      for (const OrderedJson& v : *it) alts += (alts.empty() ? "" : " | ") + GbnfLiteral(DumpJson(v));
      return "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) return Unsupported(path, fmt::format("'{}' must be a non-empty list", key));
        std::string alts;
        for (size_t i = 0; i < it->size(); ++i) {
          ASSIGN_OR_RETURN(std::string a, Visit((*it)[i], fmt::format("{}/{}/{}", path, key, i)));
          alts += (alts.empty() ? "" : " | ") + a;
        }
        return "(" + alts + ")";
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) return Unsupported(path, "'allOf' of more than one schema is not supported");
      return Visit((*it)[0], path + "/allOf/0");
    }
    // (An OpenAI response_format json_schema wrapper: {"name", "schema", "strict"}.)
    if (auto it = s.find("schema"); it != s.end() && !s.contains("type")) return Visit(*it, path + "/schema");
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const OrderedJson& t : *it) {
          if (!t.is_string()) return Unsupported(path, "'type' must be a string or a list of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Unsupported(path, "'type' must be a string or a list of strings");
      }
    } else if (s.contains("properties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems")) {
      types.push_back("array");
    } else {
      return std::string("json-value");  // no constraint
    }
    std::string alts;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string a, Typed(s, t, path));
      alts += (alts.empty() ? "" : " | ") + a;
    }
    return types.size() == 1 ? alts : "(" + alts + ")";
  }

  StatusOr<std::string> Ref(const std::string& ref, const std::string& path) {
    std::string name;
    const OrderedJson* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(prefix, 0) == 0) {
        name = ref.substr(std::string(prefix).size());
        const std::string key = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        if (auto it = root_.find(key); it != root_.end() && it->is_object()) defs = &*it;
      }
    }
    if (ref == "#") return Ref("#/", path);
    if (ref == "#/") {  // the whole schema, recursively
      if (auto it = refs_.find("#"); it != refs_.end()) return it->second;
      const std::string rule = NewRule("");
      refs_["#"] = rule;
      ASSIGN_OR_RETURN(std::string body, Visit(root_, "#"));
      SetRule(rule, body);
      return rule;
    }
    if (defs == nullptr || !defs->contains(name)) {
      return Unsupported(path, fmt::format("$ref '{}' is not a local #/$defs or #/definitions entry", ref));
    }
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const std::string rule = NewRule("");  // named first: recursive references find it
    refs_[ref] = rule;
    ASSIGN_OR_RETURN(std::string body, Visit((*defs)[name], ref));
    SetRule(rule, body);
    return rule;
  }
  void SetRule(const std::string& name, const std::string& body) {
    for (auto& [n, b] : rules_) {
      if (n == name) b = body;
    }
  }

  static StatusOr<int> Bound(const OrderedJson& s, const char* key, const std::string& path, int fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxRepeat) {
      return InvalidArgument(fmt::format("JSON schema at {}: '{}' must be an integer in [0, {}]", path, key, kMaxRepeat));
    }
    return static_cast<int>(it->get<int64_t>());
  }
  // "{m,n}" after an item (n < 0: unbounded).
  static std::string Repeat(const std::string& item, int lo, int hi) {
    if (lo == 0 && hi < 0) return item + "*";
    if (hi < 0) return fmt::format("{}{{{},}}", item, lo);
    return fmt::format("{}{{{},{}}}", item, lo, hi);
  }

  StatusOr<std::string> Typed(const OrderedJson& s, const std::string& type, const std::string& path) {
    if (type == "string") {
      ASSIGN_OR_RETURN(int lo, Bound(s, "minLength", path, 0));
      ASSIGN_OR_RETURN(int hi, Bound(s, "maxLength", path, -1));
      if (auto f = s.find("format"); f != s.end() && f->is_string()) {
        static const std::set<std::string> kFree = {"text", "string"};
        if (!kFree.count(f->get<std::string>())) {
          return Unsupported(path, fmt::format("string format '{}' is not supported", f->get<std::string>()));
        }
      }
      if (lo == 0 && hi < 0) return std::string("json-string");
      if (hi >= 0 && hi < lo) return Unsupported(path, "maxLength < minLength");
      return NewRule("\"\\\"\" " + Repeat("json-char", lo, hi) + " \"\\\"\"");
    }
    if (type == "integer") {
      bool non_negative = false;
      if (auto m = s.find("minimum"); m != s.end()) {
        if (!m->is_number() || m->get<double>() != 0) return Unsupported(path, "'minimum' other than 0 is not supported");
        non_negative = true;
      }
      if (auto m = s.find("exclusiveMinimum"); m != s.end()) {
        if (!m->is_number() || m->get<double>() != -1) {
          return Unsupported(path, "'exclusiveMinimum' other than -1 is not supported");
        }
        non_negative = true;
      }
      return std::string(non_negative ? "( \"0\" | [1-9] [0-9]{0,15} )" : "json-integer");
    }
    if (s.contains("minimum") || s.contains("exclusiveMinimum")) {
      return Unsupported(path, "'minimum' is supported on integers only (as 0)");
    }
    if (type == "number") return std::string("json-number");
    if (type == "boolean") return std::string("json-boolean");
    if (type == "null") return std::string("json-null");
    if (type == "array") return Array(s, path);
    if (type == "object") return Object(s, path);
    return Unsupported(path, fmt::format("unknown type '{}'", type));
  }

  StatusOr<std::string> Array(const OrderedJson& s, const std::string& path) {
    ASSIGN_OR_RETURN(int lo, Bound(s, "minItems", path, 0));
    ASSIGN_OR_RETURN(int hi, Bound(s, "maxItems", path, -1));
    if (hi >= 0 && hi < lo) return Unsupported(path, "maxItems < minItems");
    std::vector<std::string> prefix;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) return Unsupported(path, "'prefixItems' must be a list");
      for (size_t i = 0; i < it->size(); ++i) {
        ASSIGN_OR_RETURN(std::string p, Visit((*it)[i], fmt::format("{}/prefixItems/{}", path, i)));
        prefix.push_back(p);
      }
      if (lo < static_cast<int>(prefix.size())) {
        return Unsupported(path, "prefixItems with fewer required items (minItems) is not supported");
      }
    }
    std::string item = "json-value";
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_boolean() && !it->get<bool>()) {
        item.clear();
      } else {
        ASSIGN_OR_RETURN(item, Visit(*it, path + "/items"));
      }
    }
    const int n_prefix = static_cast<int>(prefix.size());
    if (item.empty()) {
      if (n_prefix == 0) return NewRule("\"[\" ws \"]\"");
      hi = n_prefix;
    }
    // "[" p1 "," p2 ... then the rest: (lo - n_prefix) .. (hi - n_prefix) items.
    std::string body = "\"[\" ws";
    for (int i = 0; i < n_prefix; ++i) body += (i ? " \",\" ws " : " ") + prefix[i] + " ws";
    const int rest_lo = std::max(0, lo - n_prefix);
    const int rest_hi = hi < 0 ? -1 : hi - n_prefix;
    if (rest_hi != 0 && !item.empty()) {
      const std::string more = NewRule("\",\" ws " + item + " ws");
      if (n_prefix > 0) {
        body += " " + Repeat(more, rest_lo, rest_hi);
      } else if (rest_lo > 0) {
        body += " " + item + " ws " + Repeat(more, rest_lo - 1, rest_hi < 0 ? -1 : rest_hi - 1);
      } else {
        body += " ( " + item + " ws " + Repeat(more, 0, rest_hi < 0 ? -1 : rest_hi - 1) + " )?";
      }
    }
    return NewRule(body + " \"]\"");
  }

  StatusOr<std::string> Object(const OrderedJson& s, const std::string& path) {
    std::vector<std::string> names;
    std::map<std::string, std::string> value_of;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Unsupported(path, "'properties' must be an object");
      for (const auto& [name, sub] : it->items()) {
        ASSIGN_OR_RETURN(std::string v, Visit(sub, path + "/properties/" + name));
        names.push_back(name);
        value_of[name] = v;
      }
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Unsupported(path, "'required' must be a list");
      for (const OrderedJson& r : *it) {
        if (!r.is_string() || !value_of.count(r.get<std::string>())) {
          return Unsupported(path, "every 'required' name must be one of 'properties'");
        }
        required.insert(r.get<std::string>());
      }
    }
    std::string extra;  // the value rule of additional members ("" : none)
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        if (it->get<bool>()) extra = "json-value";
      } else {
        ASSIGN_OR_RETURN(extra, Visit(*it, path + "/additionalProperties"));
      }
    } else if (names.empty()) {
      extra = "json-value";  // {"type": "object"}: any object
    }
    auto member = [&](const std::string& name) {
      return NewRule(GbnfLiteral(DumpJson(OrderedJson(name))) + " ws \":\" ws " + value_of[name] + " ws");
    };
    std::string extra_member;
    if (!extra.empty()) {
      // Additional members: any other key (a known name again would make
      // the object ambiguous; JSON parsers keep the last, validators check it).
      std::string key = "json-string";
      if (auto pn = s.find("propertyNames"); pn != s.end()) {
        if (!pn->is_object() || pn->value("type", "string") != "string") {
          return Unsupported(path, "'propertyNames' must be a string schema");
        }
        OrderedJson as_string = *pn;
        as_string["type"] = "string";
        ASSIGN_OR_RETURN(key, Visit(as_string, path + "/propertyNames"));
      }
      extra_member = NewRule(key + " ws \":\" ws " + extra + " ws");
    }
    // Members in order; a comma before every member but the first present.
    // tail_k: what may follow once some member before k is present.
    std::vector<std::string> tail(names.size() + 1);
    tail[names.size()] = extra_member.empty() ? "" : NewRule("( \",\" ws " + extra_member + " )*");
    for (int k = static_cast<int>(names.size()) - 1; k >= 0; --k) {
      const std::string m = member(names[k]);
      const std::string rest = tail[k + 1].empty() ? "" : " " + tail[k + 1];
      tail[k] = NewRule(required.count(names[k]) ? "\",\" ws " + m + rest
                                                 : "( \",\" ws " + m + " )?" + rest);
    }
    // The first present member: the first required one, or any optional one
    // before it (then the tail after it), or (none present) an extra member.
    std::string starts;
    for (size_t k = 0; k < names.size(); ++k) {
      const std::string m = member(names[k]);
      const std::string rest = tail[k + 1].empty() ? "" : " " + tail[k + 1];
      starts += (starts.empty() ? "" : " | ") + m + rest;
      if (required.count(names[k])) break;
    }
    const bool all_optional = required.empty();
    if (all_optional && !extra_member.empty()) starts += (starts.empty() ? "" : " | ") + extra_member + " " + tail[names.size()];
    std::string body = "\"{\" ws ";
    if (starts.empty()) {
      body += "\"}\"";
    } else {
      body += all_optional ? "( " + starts + " )? \"}\"" : "( " + starts + " ) \"}\"";
    }
    return NewRule(body);
  }

  const OrderedJson& root_;
  std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

StatusOr<std::string> JsonSchemaToGbnf(const OrderedJson& schema) { return Converter(schema).Run(); }

StatusOr<std::string> JsonSchemaToGbnfExpr(const OrderedJson& schema, const std::string& prefix, std::string* rules) {
  return Converter(schema, prefix).RunExpr(rules);
}

const char* JsonGbnfPrimitives() { return kPrimitives; }

}  // namespace infera::server
