#include "tools/grammar_flags.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/json.h"
#include "server/json_schema_grammar.h"
#include "server/output_constraints.h"
#include "tools/cli_common.h"

namespace infera::cli {

void AddGrammarFlags(CLI::App& app, GrammarFlags* f) {
  app.add_option("--grammar", f->grammar,
                 "constrain the output to this GBNF grammar (llama.cpp's notation; rule root)");
  app.add_option("--grammar-file", f->grammar_file, "constrain the output to the GBNF grammar in this file");
  app.add_option("-j,--json-schema", f->json_schema,
                 "constrain the output to JSON valid against this JSON schema ('{}': any JSON object)");
  app.add_option("--json-schema-file", f->json_schema_file,
                 "the same with the schema read from a file (llama.cpp's -jf)");
}

StatusOr<std::shared_ptr<const Grammar>> GrammarFromFlags(const GrammarFlags& f) {
  std::vector<std::pair<const char*, const std::string*>> given;
  for (const auto& [name, value] :
       {std::pair{"--grammar", &f.grammar}, std::pair{"--grammar-file", &f.grammar_file},
        std::pair{"--json-schema", &f.json_schema}, std::pair{"--json-schema-file", &f.json_schema_file}}) {
    if (!value->empty()) given.emplace_back(name, value);
  }
  if (given.empty()) return std::shared_ptr<const Grammar>();
  if (given.size() > 1) {
    return InvalidArgument(
        fmt::format("{} and {} both constrain the output; give one", given[0].first, given[1].first));
  }
  const std::string flag = given[0].first;
  std::string text = *given[0].second;
  if (flag == "--grammar-file" || flag == "--json-schema-file") {
    auto read = ReadTextArg(text);
    if (!read.ok()) return InvalidArgument(fmt::format("{}: {}", flag, read.status().message()));
    text = std::move(read).value();
  }
  std::string gbnf = text;
  if (flag == "--json-schema" || flag == "--json-schema-file") {
    const nlohmann::ordered_json schema = ParseOrderedJson(text);
    if (schema.is_discarded()) return InvalidArgument(fmt::format("{}: the schema is not valid JSON", flag));
    if (schema.is_object() && schema.empty()) {
      gbnf = server::kJsonObjectGbnf;
    } else {
      auto converted = server::JsonSchemaToGbnf(schema);
      if (!converted.ok()) return InvalidArgument(fmt::format("{}: {}", flag, converted.status().message()));
      gbnf = std::move(converted).value();
    }
  }
  auto grammar = Grammar::Parse(gbnf);
  if (!grammar.ok()) return InvalidArgument(fmt::format("{}: {}", flag, grammar.status().message()));
  return std::move(grammar).value();
}

}  // namespace infera::cli
