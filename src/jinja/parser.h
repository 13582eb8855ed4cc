// Jinja source -> Program. Whitespace is handled as transformers configures
// Jinja2 for chat templates: trim_blocks and lstrip_blocks on, plus the
// "-" / "+" markers of each tag.
#pragma once

#include <memory>
#include <string_view>

#include "jinja/ast.h"

namespace infera::jinja {

// Throws JinjaError ("line N: ...") on a syntax error.
std::unique_ptr<Program> ParseTemplate(std::string_view source);

}  // namespace infera::jinja
