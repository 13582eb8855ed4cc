#include "server/output_constraints.h"

#include <fmt/format.h>

#include "base/json.h"
#include "server/json_schema_grammar.h"
#include "server/regex_grammar.h"

namespace infera::server {

using OrderedJson = nlohmann::ordered_json;

const char kJsonObjectGbnf[] = R"(
root    ::= "{" ws ( member ( "," ws member )* )? "}"
member  ::= string ":" ws value
value   ::= object | array | string | number | ( "true" | "false" | "null" ) ws
object  ::= "{" ws ( member ( "," ws member )* )? "}" ws
array   ::= "[" ws ( value ( "," ws value )* )? "]" ws
string  ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number  ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? ws
ws      ::= ( " " | "\n" [ \t]{0,20} )?
)";

bool ParseOutputConstraint(const OrderedJson& body, std::shared_ptr<const Grammar>* grammar, ApiError* err) {
  grammar->reset();
  std::string gbnf, from;
  auto take = [&](const char* field, std::string text) {
    if (!from.empty()) {
      return SetBadValue(err, field, fmt::format("'{}' and '{}' both constrain the output: give one", from, field));
    }
    from = field;
    gbnf = std::move(text);
    return true;
  };
  for (const char* field : {"grammar", "guided_grammar"}) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty())) continue;
    if (!it->is_string()) return SetBadValue(err, field, fmt::format("'{}' must be a string of GBNF rules", field));
    if (!take(field, it->get<std::string>())) return false;
  }
  if (auto it = body.find("guided_regex"); it != body.end() && !it->is_null() &&
                                            !(it->is_string() && it->get_ref<const std::string&>().empty())) {
    if (!it->is_string()) return SetBadValue(err, "guided_regex", "'guided_regex' must be a string");
    auto g = RegexToGbnf(it->get<std::string>());
    if (!g.ok()) return SetBadValue(err, "guided_regex", g.status().message());
    if (!take("guided_regex", *g)) return false;
  }
  if (auto it = body.find("guided_choice"); it != body.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    if (!it->is_array()) return SetBadValue(err, "guided_choice", "'guided_choice' must be a list of strings");
    std::string rule = "root ::= ";
    for (size_t i = 0; i < it->size(); ++i) {
      const OrderedJson& c = (*it)[i];
      if (!c.is_string() || c.get_ref<const std::string&>().empty()) {
        return SetBadValue(err, "guided_choice", "'guided_choice' must be a list of non-empty strings");
      }
      rule += (i ? " | " : "") + GbnfLiteral(c.get<std::string>());
    }
    if (!take("guided_choice", rule)) return false;
  }
  auto schema = [&](const char* field, const OrderedJson& v) {
    OrderedJson parsed = v;
    if (v.is_string()) {  // (vLLM takes guided_json as text too)
      parsed = ParseOrderedJson(v.get<std::string>());
      if (parsed.is_discarded()) return SetBadValue(err, field, fmt::format("'{}' is not valid JSON", field));
    }
    auto gbnf = JsonSchemaToGbnf(parsed);
    if (!gbnf.ok()) return SetBadValue(err, field, gbnf.status().message());
    return take(field, *gbnf);
  };
  for (const char* field : {"json_schema", "guided_json"}) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null() || (it->is_object() && it->empty())) continue;
    if (!it->is_object() && !it->is_string() && !it->is_boolean()) {
      return SetBadValue(err, field, fmt::format("'{}' must be a JSON schema", field));
    }
    if (!schema(field, *it)) return false;
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    auto type_it = it->is_object() ? it->find("type") : it->end();
    if (type_it == it->end() || !type_it->is_string()) {
      return SetBadValue(err, "response_format", "response_format needs a string 'type' (text, json_object or json_schema)");
    }
    const std::string type = type_it->get<std::string>();
    if (type == "json_object") {
      if (!take("response_format", kJsonObjectGbnf)) return false;
    } else if (type == "json_schema") {
      // OpenAI: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}.
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object()) {
        return SetBadValue(err, "response_format", "response_format json_schema needs a 'json_schema' object");
      }
      auto sc = js->find("schema");
      if (!schema("response_format", sc == js->end() ? OrderedJson::object() : *sc)) return false;
    } else if (type != "text") {
      return SetBadValue(err, "response_format", "response_format type must be text, json_object or json_schema");
    }
  }
  if (from.empty()) return true;
  auto g = Grammar::Parse(gbnf);
  if (!g.ok()) return SetBadValue(err, from, fmt::format("'{}': {}", from, g.status().message()));
  *grammar = std::move(g).value();
  return true;
}

}  // namespace infera::server
