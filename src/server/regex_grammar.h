// Regular expression -> GBNF (vLLM's guided_regex): the grammar of the
// strings the whole pattern matches. Supported: literals, . (any character
// but newline), classes [a-z] [^...] with \d \w \s inside, \d \w \s \D \W \S,
// escapes (\n \t \r \f \v \xHH \uHHHH and escaped punctuation), groups
// (...) and (?:...) and (?P<name>...), alternation, * + ? {m} {m,} {m,n}
// (lazy forms: the same language), ^ and $ at the ends. Refused: back
// references, lookaround, inline flags, anchors elsewhere.
#pragma once

#include <string>
#include <string_view>

#include "infera/status.h"

namespace infera::server {

StatusOr<std::string> RegexToGbnf(std::string_view regex);

}  // namespace infera::server
