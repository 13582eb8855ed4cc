// llama-cli's output-constraint flags for `infera run`: --grammar GBNF,
// --grammar-file FILE, -j/--json-schema SCHEMA and --json-schema-file FILE
// (llama.cpp's -jf, renamed in foreign_flags.cc). At most one; the engine
// then masks every token that would leave the grammar (RequestParams::grammar).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "infera/status.h"
#include "sampling/grammar.h"

namespace infera::cli {

struct GrammarFlags {
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

void AddGrammarFlags(CLI::App& app, GrammarFlags* f);

// The grammar the flags ask for: null when none is given. An error (bad
// input) names the flag: two constraints at once, an unreadable file, GBNF
// that does not parse, a schema that is not JSON or uses a keyword the
// schema converter cannot honour. `-j {}` is any JSON object, as in llama.cpp.
StatusOr<std::shared_ptr<const Grammar>> GrammarFromFlags(const GrammarFlags& f);

}  // namespace infera::cli
