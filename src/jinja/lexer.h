// Jinja source -> pieces: text (whitespace control applied, as transformers
// configures Jinja2: trim_blocks, lstrip_blocks, "-" / "+" markers), and the
// expression tokens of each {{ ... }} and {% ... %} tag. Internal to the
// jinja module (parser.cc reads the pieces).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::jinja {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, decoded string
  int64_t i = 0;
  double d = 0;
};

// One piece of the template: text, {{ expression }} or {% statement %}.
struct Piece {
  enum class Kind { kText, kVar, kBlock };
  Kind kind;
  int line;
  std::string text;           // kText
  std::vector<Token> tokens;  // kVar / kBlock, ending with kEnd
};

// Throws JinjaError ("line N: ...") on an unterminated tag or string, or a
// character no expression may hold.
std::vector<Piece> Lex(std::string_view src);

}  // namespace infera::jinja
