// The output constraints a completion request may ask for, as one grammar:
// llama.cpp's `grammar` and vLLM's `guided_grammar` (GBNF text), vLLM's
// `guided_choice` (one of a list of strings), OpenAI's `response_format`
// {"type": "json_object"} (any JSON object) and {"type": "json_schema"},
// llama.cpp's `json_schema` and vLLM's `guided_json` (JSON that validates
// against a schema: json_schema_grammar.h). At most one per request.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "sampling/grammar.h"
#include "server/openai_request.h"

namespace infera::server {

// The GBNF of a JSON object (whitespace bounded, so output cannot run on in
// spaces): what json_object mode constrains to.
extern const char kJsonObjectGbnf[];

// Sets *grammar from the body's constraint fields (null if none). False with
// *err (400 naming the field) on a bad or conflicting constraint.
// `body` ordered (parsed from the request text) keeps JSON schemas' property
// order; a plain nlohmann::json converts, in key order.
bool ParseOutputConstraint(const nlohmann::ordered_json& body, std::shared_ptr<const Grammar>* grammar, ApiError* err);

}  // namespace infera::server
