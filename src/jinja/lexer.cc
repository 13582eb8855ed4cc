#include "jinja/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "jinja/value.h"

namespace infera::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendCodePoint(uint32_t cp, std::string* out) { *out += EncodeUtf8(std::u32string(1, static_cast<char32_t>(cp))); }

std::vector<Token> Tokenize(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    Token t;
    if (IsNameStart(c)) {
      size_t j = i;
      while (j < s.size() && (IsNameStart(s[j]) || IsDigit(s[j]))) ++j;
      t.kind = Token::Kind::kName;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (IsDigit(c)) {
      size_t j = i;
      while (j < s.size() && (IsDigit(s[j]) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && IsDigit(s[j + 1])) {
        is_float = true;
        ++j;
        while (j < s.size() && IsDigit(s[j])) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && IsDigit(s[k])) {
          is_float = true;
          j = k;
          while (j < s.size() && IsDigit(s[j])) ++j;
        }
      }
      std::string num;
      for (char ch : s.substr(i, j - i)) {
        if (ch != '_') num += ch;
      }
      if (is_float) {
        t.kind = Token::Kind::kFloat;
        t.d = std::strtod(num.c_str(), nullptr);
      } else {
        t.kind = Token::Kind::kInt;
        errno = 0;
        t.i = std::strtoll(num.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail(line, "integer literal out of range: " + num);
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      t.kind = Token::Kind::kString;
      size_t j = i + 1;
      for (;; ++j) {
        if (j >= s.size()) Fail(line, "unterminated string literal");
        if (s[j] == c) break;
        if (s[j] != '\\') {
          t.text += s[j];
          continue;
        }
        if (++j >= s.size()) Fail(line, "unterminated string literal");
        switch (s[j]) {
          case 'n': t.text += '\n'; break;
          case 't': t.text += '\t'; break;
          case 'r': t.text += '\r'; break;
          case '0': t.text += '\0'; break;
          case 'a': t.text += '\a'; break;
          case 'b': t.text += '\b'; break;
          case 'f': t.text += '\f'; break;
          case 'v': t.text += '\v'; break;
          case '\\': t.text += '\\'; break;
          case '\'': t.text += '\''; break;
          case '"': t.text += '"'; break;
          case '\n': break;  // line continuation
          case 'x':
          case 'u':
          case 'U': {
            const int n = s[j] == 'x' ? 2 : s[j] == 'u' ? 4 : 8;
            if (j + n >= s.size()) Fail(line, "truncated string escape");
            uint32_t cp = 0;
            for (int k = 1; k <= n; ++k) {
              const char h = s[j + k];
              const int v = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
              if (v < 0) Fail(line, "bad hex digit in string escape");
              cp = cp * 16 + static_cast<uint32_t>(v);
            }
            if (cp > 0x10FFFF) Fail(line, "string escape out of range");
            AppendCodePoint(cp, &t.text);
            j += n;
            break;
          }
          default:  // Python keeps unknown escapes as written
            t.text += '\\';
            t.text += s[j];
        }
      }
      i = j + 1;
    } else {
      static const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
      t.kind = Token::Kind::kOp;
      for (const char* op : kTwo) {
        if (s.substr(i, 2) == op) t.text.assign(op, 2);
      }
      if (t.text.empty()) {
        if (std::strchr("+-*/%~<>=()[]{}.,:|!", c) == nullptr) {
          std::string msg = "unexpected character '";
          msg.append(1, c).append("'");
          Fail(line, msg);
        }
        t.text = std::string(1, c);
      }
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{});
  return out;
}

// Finds the end marker `close` ("}}" or "%}") of a tag whose inside starts at
// `from`, skipping quoted strings; npos if none.
size_t FindTagEnd(std::string_view src, size_t from, std::string_view close) {
  char quote = 0;
  for (size_t i = from; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (src.compare(i, close.size(), close) == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

int CountLines(std::string_view s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

// Appends template text, applying whitespace control: strip_next (the tag
// before ended "-"), trim_next (it was a block: drop one newline),
// rstrip_all (the tag after starts "-"), lstrip_block (the tag after is a
// block: drop the spaces before it on its line).
void AddText(std::vector<Piece>* pieces, std::string text, int line, bool at_start, bool strip_next, bool trim_next,
             bool rstrip_all, bool lstrip_block) {
  if (strip_next) {
    size_t k = 0;
    while (k < text.size() && IsSpace(text[k])) ++k;
    text.erase(0, k);
  } else if (trim_next) {
    if (text.compare(0, 1, "\n") == 0) {
      text.erase(0, 1);
    } else if (text.compare(0, 2, "\r\n") == 0) {
      text.erase(0, 2);
    }
  }
  if (rstrip_all) {
    size_t k = text.size();
    while (k > 0 && IsSpace(text[k - 1])) --k;
    text.resize(k);
  } else if (lstrip_block) {
    const size_t nl = text.rfind('\n');
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    if ((nl != std::string::npos || at_start) && text.find_first_not_of(" \t", start) == std::string::npos) {
      text.resize(start);
    }
  }
  if (!text.empty()) pieces->push_back(Piece{Piece::Kind::kText, line, std::move(text), {}});
}

}  // namespace

// Splits the source into pieces, applying whitespace control.
std::vector<Piece> Lex(std::string_view src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // the previous tag ended with "-"
  bool trim_next = false;   // the previous tag was a block/comment (trim_blocks)
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string_view::npos && open + 1 < src.size() && std::strchr("{%#", src[open + 1]) == nullptr) {
      open = src.find('{', open + 1);
    }
    if (open == std::string_view::npos || open + 1 >= src.size()) {
      std::string text(src.substr(pos));
      AddText(&pieces, std::move(text), line, pos == 0, strip_next, trim_next, false, false);
      break;
    }
    const char type = src[open + 1];
    size_t inner = open + 2;
    bool minus_left = false, plus_left = false;
    if (inner < src.size() && src[inner] == '-') {
      minus_left = true;
      ++inner;
    } else if (inner < src.size() && src[inner] == '+') {
      plus_left = true;
      ++inner;
    }
    const bool is_block_like = type != '{';
    AddText(&pieces, std::string(src.substr(pos, open - pos)), line, pos == 0, strip_next, trim_next, minus_left,
            is_block_like && !plus_left);
    line += CountLines(src, pos, open);
    const int tag_line = line;
    const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    size_t end = type == '#' ? src.find(close, inner) : FindTagEnd(src, inner, close);
    if (end == std::string_view::npos) {
      Fail(tag_line, type == '{' ? "unclosed '{{'" : type == '%' ? "unclosed '{%'" : "unclosed comment");
    }
    bool minus_right = false;
    size_t inner_end = end;
    if (inner_end > inner && src[inner_end - 1] == '-') {
      minus_right = true;
      --inner_end;
    } else if (inner_end > inner && src[inner_end - 1] == '+' && type != '{') {
      --inner_end;  // "+%}": keep trim_blocks off for this tag
    }
    std::string_view body = src.substr(inner, inner_end - inner);
    line += CountLines(src, open, end);
    pos = end + 2;
    strip_next = minus_right;
    trim_next = is_block_like && !(src[end - 1] == '+');
    if (type == '#') continue;
    Piece p{type == '{' ? Piece::Kind::kVar : Piece::Kind::kBlock, tag_line, {}, Tokenize(body, tag_line)};
    // {% raw %} ... {% endraw %}: the text between is kept verbatim.
    if (p.kind == Piece::Kind::kBlock && p.tokens.size() == 2 && p.tokens[0].kind == Token::Kind::kName &&
        p.tokens[0].text == "raw") {
      size_t search = pos;
      for (;;) {
        const size_t o = src.find("{%", search);
        if (o == std::string_view::npos) Fail(tag_line, "missing {% endraw %}");
        size_t k = o + 2;
        const bool m_left = k < src.size() && src[k] == '-';
        if (m_left) ++k;
        while (k < src.size() && IsSpace(src[k])) ++k;
        if (src.compare(k, 6, "endraw") != 0) {
          search = o + 2;
          continue;
        }
        const size_t e = src.find("%}", k);
        if (e == std::string_view::npos) Fail(tag_line, "unclosed '{%'");
        std::string raw(src.substr(pos, o - pos));
        AddText(&pieces, std::move(raw), line, false, strip_next, trim_next, m_left, false);
        line += CountLines(src, pos, e);
        strip_next = src[e - 1] == '-';
        trim_next = true;
        pos = e + 2;
        break;
      }
      continue;
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}


}  // namespace infera::jinja
