#include "jinja/template.h"

#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace infera::jinja {

StatusOr<Template> Template::Parse(std::string_view source) {
  Template t;
  try {
    t.program_ = ParseTemplate(source);
  } catch (const JinjaError& e) {
    return InvalidArgument(std::string("chat template: ") + e.what());
  }
  t.source_ = std::make_shared<const std::string>(source);
  return t;
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context, const RenderLimits& limits) const {
  if (!context.is_object()) return InvalidArgument("chat template: the context must be a JSON object");
  ValueDict globals;
  AddGlobals(&globals);
  for (const auto& [k, v] : context.items()) {
    bool replaced = false;
    for (auto& [gk, gv] : globals) {
      if (gk == k) {
        gv = Value::FromJson(v);
        replaced = true;
      }
    }
    if (!replaced) globals.emplace_back(k, Value::FromJson(v));
  }
  try {
    Interpreter in(*program_, limits);
    return in.Render(globals);
  } catch (const JinjaError& e) {
    return InvalidArgument(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return InvalidArgument("chat template: out of memory while rendering");
  }
}

}  // namespace infera::jinja
