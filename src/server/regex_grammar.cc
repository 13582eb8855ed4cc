#include "server/regex_grammar.h"

#include <cctype>

#include <fmt/format.h>

namespace infera::server {

namespace {

constexpr int kMaxRepeat = 1000;

// A code point as a GBNF character (escaped when not plain printable ASCII).
std::string CharText(uint32_t cp, bool in_class) {
  if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '['))) {
    return fmt::format("\\{}", static_cast<char>(cp));
  }
  if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFF) return fmt::format("\\x{:02X}", cp);
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view re) : s_(re) {}

  StatusOr<std::string> Run() {
    if (!s_.empty() && s_[0] == '^') ++pos_;
    ASSIGN_OR_RETURN(std::string expr, Alternation());
    if (pos_ < s_.size()) return Error(fmt::format("unexpected '{}'", s_[pos_]));
    return fmt::format("root ::= {}\n", expr);
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument(fmt::format("regex: {} at offset {}", what, pos_));
  }
  bool At(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool AtEnd() const { return pos_ >= s_.size(); }

  StatusOr<uint32_t> Utf8() {
    const auto b0 = static_cast<uint8_t>(s_[pos_]);
    const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > s_.size()) return Error("invalid UTF-8");
    uint32_t v = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < n; ++k) v = (v << 6) | (static_cast<uint8_t>(s_[pos_ + k]) & 0x3F);
    pos_ += n;
    return v;
  }

  StatusOr<std::string> Alternation() {
    std::string out;
    int n = 0;
    while (true) {
      ASSIGN_OR_RETURN(std::string seq, Sequence());
      out += fmt::format("{}{}", n++ ? " | " : "", seq.empty() ? std::string("\"\"") : seq);
      if (!At('|')) break;
      ++pos_;
    }
    return n > 1 ? fmt::format("({})", out) : out;
  }

  StatusOr<std::string> Sequence() {
    std::string out;
    while (!AtEnd() && !At('|') && !At(')')) {
      if (At('$') && pos_ + 1 == s_.size()) {
        ++pos_;
        break;
      }
      ASSIGN_OR_RETURN(std::string atom, Atom());
      ASSIGN_OR_RETURN(std::string q, Quantifier());
      out += fmt::format("{}{}{}", out.empty() ? "" : " ", atom, q);
    }
    return out;
  }

  StatusOr<std::string> Quantifier() {
    if (AtEnd()) return std::string();
    std::string q;
    const char c = s_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{') {
      const size_t save = pos_++;
      auto number = [&](int* out) {
        const size_t start = pos_;
        int64_t v = 0;
        while (!AtEnd() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && v <= kMaxRepeat) {
          v = v * 10 + (s_[pos_++] - '0');
        }
        *out = static_cast<int>(v);
        return pos_ > start;
      };
      int lo = 0, hi = 0;
      if (!number(&lo)) {  // a literal '{'
        pos_ = save;
        return std::string();
      }
      hi = lo;
      bool open = false;
      if (At(',')) {
        ++pos_;
        if (!number(&hi)) open = true;
      }
      if (!At('}')) return Error("expected '}'");
      ++pos_;
      if (lo > kMaxRepeat || hi > kMaxRepeat || (!open && hi < lo)) return Error("bad repetition");
      q = open ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
    } else {
      return std::string();
    }
    if (At('?') || At('+')) ++pos_;  // lazy / possessive: the same strings
    return q;
  }

  // The class body (without brackets) of an escape like \d, or "" if not one.
  static std::string ShorthandClass(char c, bool* negated) {
    *negated = c == 'D' || c == 'W' || c == 'S';
    switch (std::tolower(static_cast<unsigned char>(c))) {
      case 'd': return "0-9";
      case 'w': return "a-zA-Z0-9_";
      case 's': return " \\t\\n\\r\\x0B\\x0C";
      default: return "";
    }
  }

  // After a backslash: a literal code point.
  StatusOr<uint32_t> EscapedChar() {
    if (AtEnd()) return Error("a pattern may not end with '\\'");
    const char c = s_[pos_++];
    int hex = 0;
    switch (c) {
      case 'n': return uint32_t{'\n'};
      case 't': return uint32_t{'\t'};
      case 'r': return uint32_t{'\r'};
      case 'f': return uint32_t{'\f'};
      case 'v': return uint32_t{'\v'};
      case '0': return uint32_t{0};
      case 'x': hex = 2; break;
      case 'u': hex = 4; break;
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Error(fmt::format("escape '\\{}' is not supported", c));
        }
        return static_cast<uint32_t>(static_cast<uint8_t>(c));
    }
    uint32_t v = 0;
    for (int k = 0; k < hex; ++k, ++pos_) {
      if (AtEnd() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) return Error("bad hex escape");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    return v;
  }

  StatusOr<std::string> Atom() {
    const char c = s_[pos_];
    if (c == '(') {
      if (++depth_ > 64) return Error("groups nested too deeply");
      struct Leave {
        int* d;
        ~Leave() { --*d; }
      } leave{&depth_};
      ++pos_;
      if (At('?')) {
        ++pos_;
        if (At(':')) {
          ++pos_;
        } else if (At('P') && pos_ + 1 < s_.size() && s_[pos_ + 1] == '<') {
          while (!AtEnd() && !At('>')) ++pos_;
          if (AtEnd()) return Error("unterminated group name");
          ++pos_;
        } else if (At('<') && pos_ + 1 < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_ + 1]))) {
          while (!AtEnd() && !At('>')) ++pos_;
          if (AtEnd()) return Error("unterminated group name");
          ++pos_;
        } else {
          return Error("lookaround and inline flags are not supported");
        }
      }
      ASSIGN_OR_RETURN(std::string inner, Alternation());
      if (!At(')')) return Error("expected ')'");
      ++pos_;
      return fmt::format("({})", inner.empty() ? std::string("\"\"") : inner);
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return std::string("[^\\n]");
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error(fmt::format("nothing to repeat before '{}'", c));
    if (c == '^' || c == '$') return Error("anchors are supported only at the ends of the pattern");
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) return Error("a pattern may not end with '\\'");
      bool neg;
      const std::string sh = ShorthandClass(s_[pos_], &neg);
      if (!sh.empty()) {
        ++pos_;
        return fmt::format("[{}{}]", neg ? "^" : "", sh);
      }
      if (std::isdigit(static_cast<unsigned char>(s_[pos_])) && s_[pos_] != '0') {
        return Error("back references are not supported");
      }
      if (s_[pos_] == 'b' || s_[pos_] == 'B' || s_[pos_] == 'A' || s_[pos_] == 'Z') {
        return Error(fmt::format("'\\{}' (a zero-width assertion) is not supported", s_[pos_]));
      }
      ASSIGN_OR_RETURN(uint32_t cp, EscapedChar());
      return fmt::format("\"{}\"", CharText(cp, false));
    }
    ASSIGN_OR_RETURN(uint32_t cp, Utf8());
    return fmt::format("\"{}\"", CharText(cp, false));
  }

  StatusOr<std::string> Class() {
    ++pos_;  // '['
    std::string body;
    bool negated = false;
    if (At('^')) {
      negated = true;
      ++pos_;
    }
    bool first = true;
    while (!AtEnd() && (!At(']') || first)) {
      first = false;
      uint32_t lo;
      if (At('\\')) {
        ++pos_;
        if (AtEnd()) return Error("unterminated class");
        bool neg;
        const std::string sh = ShorthandClass(s_[pos_], &neg);
        if (!sh.empty()) {
          if (neg) return Error("negated shorthands (\\D \\W \\S) inside a class are not supported");
          body += sh;
          ++pos_;
          continue;
        }
        ASSIGN_OR_RETURN(lo, EscapedChar());
      } else {
        ASSIGN_OR_RETURN(lo, Utf8());
      }
      body += CharText(lo, true);
      if (At('-') && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (At('\\')) {
          ++pos_;
          ASSIGN_OR_RETURN(hi, EscapedChar());
        } else {
          ASSIGN_OR_RETURN(hi, Utf8());
        }
        if (hi < lo) return Error("a class range runs backwards");
        body += fmt::format("-{}", CharText(hi, true));
      }
    }
    if (!At(']')) return Error("unterminated class");
    ++pos_;
    return fmt::format("[{}{}]", negated ? "^" : "", body);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<std::string> RegexToGbnf(std::string_view regex) { return RegexParser(regex).Run(); }

}  // namespace infera::server
