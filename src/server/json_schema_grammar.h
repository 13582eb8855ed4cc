// JSON Schema -> GBNF: the grammar whose sentences are exactly the JSON
// texts that a schema accepts (for the keywords supported), so that
// constrained decoding produces output that always validates.
//
// Supported: type (one or a list), properties + required (properties in
// the schema's order; optional ones may be left out), additionalProperties
// (false or absent: no others; true or a schema: any others after them,
// named as a string propertyNames says),
// items, prefixItems, minItems/maxItems, minLength/maxLength, enum, const,
// anyOf/oneOf (oneOf as anyOf), allOf of one schema, $ref into #/$defs or
// #/definitions (recursion allowed), and integer minimum 0 / exclusiveMinimum
// -1 (no sign). Annotations (title, description, default, examples,
// $schema, $id, $comment, format of "text"-like kinds) are ignored. Any other
// keyword (pattern, minimum, multipleOf, ...) is refused with its path:
// ignoring it could produce output that does not validate.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "infera/status.h"

namespace infera::server {

// Properties come in the schema's order when it is an ordered_json (parsed
// from the request text); a plain nlohmann::json has lost that order.
StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);

// For grammars that embed several schemas: the GBNF expression for `schema`,
// its helper rules (named `prefix`s0, `prefix`s1, ...) appended to *rules.
// The rules refer to the primitives (ws, json-string, json-value, ...) that
// JsonGbnfPrimitives() defines; add those once.
StatusOr<std::string> JsonSchemaToGbnfExpr(const nlohmann::ordered_json& schema, const std::string& prefix,
                                           std::string* rules);
const char* JsonGbnfPrimitives();

}  // namespace infera::server
