#include "sampling/grammar.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

#include <fmt/format.h>

namespace infera {

bool GrammarElement::Matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  return in != negated;
}

namespace {

constexpr int kMaxRepeat = 1000;
constexpr int kMaxDepth = 64;       // nested groups
constexpr int kMaxRules = 20000;     // rules, helpers included
constexpr int kMaxChain = 500;       // rule references followed without consuming a character

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Decodes one UTF-8 code point at s[*i]; false if invalid (or cut short).
bool DecodeUtf8(std::string_view s, size_t* i, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) return false;
  uint32_t v = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[*i + k]);
    if ((b >> 6) != 2) return false;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *i += n;
  *cp = v;
  return true;
}

// The byte length of the UTF-8 sequence a lead byte starts (0: not a lead byte).
int Utf8Length(uint8_t b0) {
  return b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
}

}  // namespace

// Recursive-descent parser of GBNF into a Grammar.
class GbnfParser {
 public:
  explicit GbnfParser(std::string_view src) : s_(src), g_(std::make_shared<Grammar>()) {}

  StatusOr<std::shared_ptr<const Grammar>> Run(const std::string& root) {
    SkipSpace();
    while (pos_ < s_.size()) {
      RETURN_IF_ERROR(ParseRule());
      SkipSpace();
    }
    for (size_t r = 0; r < defined_.size(); ++r) {
      if (!defined_[r]) return Error(fmt::format("rule '{}' is used but never defined", g_->names_[r]));
    }
    if (g_->num_rules() > kMaxRules) {
      return InvalidArgument(fmt::format("grammar: more than {} rules (repetitions count)", kMaxRules));
    }
    auto it = ids_.find(root);
    if (it == ids_.end()) return Error(fmt::format("the grammar has no '{}' rule", root));
    g_->root_ = it->second;
    RETURN_IF_ERROR(CheckLeftRecursion());
    return std::shared_ptr<const Grammar>(std::move(g_));
  }

 private:
  Status Error(const std::string& what) const {
    size_t line = 1;
    for (size_t i = 0; i < std::min(pos_, s_.size()); ++i) line += s_[i] == '\n';
    return InvalidArgument(fmt::format("grammar: {} (line {})", what, line));
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view Name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && IsNameChar(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  // Whether a rule definition ("name ::=") starts here.
  bool AtRuleStart() {
    const size_t save = pos_;
    const bool named = !Name().empty();
    SkipSpace();
    const bool def = named && s_.substr(pos_, 3) == "::=";
    pos_ = save;
    return def;
  }

  int32_t RuleId(std::string_view name) {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(g_->rules_.size());
    ids_.emplace(std::string(name), id);
    g_->names_.emplace_back(name);
    g_->rules_.emplace_back();
    defined_.push_back(false);
    return id;
  }
  int32_t HelperRule(const std::string& base) {
    const int32_t id = RuleId(fmt::format("{}_{}", base, g_->rules_.size()));
    defined_[id] = true;
    return id;
  }
  void AddAlternative(int32_t rule, std::vector<GrammarElement> elements) {
    g_->rules_[rule].push_back(static_cast<int32_t>(g_->alts_.size()));
    g_->alts_.push_back({std::move(elements)});
  }
  static GrammarElement Ref(int32_t rule) {
    GrammarElement e;
    e.is_rule = true;
    e.rule = rule;
    return e;
  }

  Status ParseRule() {
    const std::string_view name = Name();
    if (name.empty()) return Error("expected a rule name");
    SkipSpace();
    if (s_.substr(pos_, 3) != "::=") return Error(fmt::format("expected '::=' after '{}'", name));
    pos_ += 3;
    const int32_t id = RuleId(name);
    if (defined_[id]) return Error(fmt::format("rule '{}' is defined twice", name));
    defined_[id] = true;
    current_ = std::string(name);
    return ParseAlternatives(id, 0);
  }

  Status ParseAlternatives(int32_t rule, int depth) {
    if (depth > kMaxDepth) return Error("groups nested too deeply");
    while (true) {
      std::vector<GrammarElement> seq;
      RETURN_IF_ERROR(ParseSequence(&seq, depth));
      AddAlternative(rule, std::move(seq));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return Status::Ok();
    }
  }

  // One code point of a literal or class, escapes decoded.
  Status Char(uint32_t* cp) {
    if (pos_ >= s_.size()) return Error("unexpected end of the grammar");
    if (s_[pos_] != '\\') {
      if (!DecodeUtf8(s_, &pos_, cp)) return Error("invalid UTF-8");
      return Status::Ok();
    }
    if (++pos_ >= s_.size()) return Error("unexpected end after '\\'");
    const char c = s_[pos_++];
    int hex = 0;
    switch (c) {
      case 'n': *cp = '\n'; return Status::Ok();
      case 't': *cp = '\t'; return Status::Ok();
      case 'r': *cp = '\r'; return Status::Ok();
      case 'x': hex = 2; break;
      case 'u': hex = 4; break;
      case 'U': hex = 8; break;
      case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
        *cp = static_cast<uint8_t>(c);
        return Status::Ok();
      default: return Error(fmt::format("unknown escape '\\{}'", c));
    }
    uint32_t v = 0;
    for (int k = 0; k < hex; ++k, ++pos_) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) return Error("bad hex escape");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    if (v > 0x10FFFF) return Error("code point out of range");
    *cp = v;
    return Status::Ok();
  }

  Status ParseSequence(std::vector<GrammarElement>* seq, int depth) {
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size()) return Status::Ok();
      const char c = s_[pos_];
      if (c == '|' || c == ')') return Status::Ok();
      if (depth == 0 && AtRuleStart()) return Status::Ok();
      std::vector<GrammarElement> atom;
      if (c == '"') {
        ++pos_;
        while (pos_ < s_.size() && s_[pos_] != '"') {
          GrammarElement e;
          uint32_t cp;
          RETURN_IF_ERROR(Char(&cp));
          e.ranges.push_back({cp, cp});
          atom.push_back(std::move(e));
        }
        if (pos_ >= s_.size()) return Error("unterminated string literal");
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        GrammarElement e;
        if (pos_ < s_.size() && s_[pos_] == '^') {
          e.negated = true;
          ++pos_;
        }
        while (pos_ < s_.size() && s_[pos_] != ']') {
          uint32_t lo, hi;
          RETURN_IF_ERROR(Char(&lo));
          hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            RETURN_IF_ERROR(Char(&hi));
            if (hi < lo) return Error("a character range runs backwards");
          }
          e.ranges.push_back({lo, hi});
        }
        if (pos_ >= s_.size()) return Error("unterminated character class");
        ++pos_;
        atom.push_back(std::move(e));
      } else if (c == '.') {
        ++pos_;
        GrammarElement any;
        any.negated = true;  // nothing excluded
        atom.push_back(std::move(any));
      } else if (c == '(') {
        ++pos_;
        const int32_t group = HelperRule(current_);
        RETURN_IF_ERROR(ParseAlternatives(group, depth + 1));
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != ')') return Error("expected ')'");
        ++pos_;
        atom.push_back(Ref(group));
      } else if (IsNameChar(c)) {
        atom.push_back(Ref(RuleId(Name())));
      } else {
        return Error(fmt::format("unexpected '{}'", c));
      }
      RETURN_IF_ERROR(Postfix(&atom));
      for (GrammarElement& e : atom) seq->push_back(std::move(e));
    }
  }

  // Applies a repetition operator after `atom` (if any).
  Status Postfix(std::vector<GrammarElement>* atom) {
    if (pos_ >= s_.size()) return Status::Ok();
    const char c = s_[pos_];
    int lo, hi;  // hi < 0: unbounded
    if (c == '*') {
      lo = 0, hi = -1, ++pos_;
    } else if (c == '+') {
      lo = 1, hi = -1, ++pos_;
    } else if (c == '?') {
      lo = 0, hi = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      auto number = [&](int* out) {
        SkipSpace();
        const size_t start = pos_;
        int64_t v = 0;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && v <= kMaxRepeat) {
          v = v * 10 + (s_[pos_++] - '0');
        }
        *out = static_cast<int>(v);
        return pos_ > start;
      };
      if (!number(&lo)) return Error("expected a number after '{'");
      SkipSpace();
      hi = lo;
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == '}') {
          hi = -1;
        } else if (!number(&hi)) {
          return Error("expected a number or '}'");
        }
      }
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '}') return Error("expected '}'");
      ++pos_;
      if (lo > kMaxRepeat || hi > kMaxRepeat || (hi >= 0 && hi < lo)) {
        return Error(fmt::format("bad repetition {{{},{}}} (at most {})", lo, hi, kMaxRepeat));
      }
    } else {
      return Status::Ok();
    }
    // One element to repeat: a multi-character literal becomes a rule.
    GrammarElement item;
    if (atom->size() == 1) {
      item = std::move((*atom)[0]);
    } else {
      const int32_t r = HelperRule(current_);
      AddAlternative(r, std::move(*atom));
      item = Ref(r);
    }
    atom->clear();
    for (int k = 0; k < lo; ++k) atom->push_back(item);
    if (hi < 0) {  // item*: star ::= item star | ε
      const int32_t star = HelperRule(current_);
      AddAlternative(star, {item, Ref(star)});
      AddAlternative(star, {});
      atom->push_back(Ref(star));
    } else if (hi > lo) {  // up to hi - lo more: opt_k ::= item opt_{k+1} | ε
      int32_t next = -1;
      for (int k = hi - lo; k >= 1; --k) {
        const int32_t opt = HelperRule(current_);
        std::vector<GrammarElement> seq = {item};
        if (next >= 0) seq.push_back(Ref(next));
        AddAlternative(opt, std::move(seq));
        AddAlternative(opt, {});
        next = opt;
      }
      atom->push_back(Ref(next));
    }
    return Status::Ok();
  }

  // Refuses rules that can reach themselves without consuming input.
  Status CheckLeftRecursion() {
    const int32_t n = g_->num_rules();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (int32_t a : g_->rules_[r]) {
          bool all = true;
          for (const GrammarElement& e : g_->alts_[a].elements) {
            if (!e.is_rule || !nullable[e.rule]) {
              all = false;
              break;
            }
          }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // Edges to the rules an alternative may start with.
    std::vector<std::vector<int32_t>> first(n);
    for (int32_t r = 0; r < n; ++r) {
      for (int32_t a : g_->rules_[r]) {
        for (const GrammarElement& e : g_->alts_[a].elements) {
          if (!e.is_rule) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
      }
    }
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<int32_t(int32_t)> visit = [&](int32_t r) -> int32_t {
      color[r] = 1;
      for (int32_t s : first[r]) {
        if (color[s] == 1) return s;
        if (color[s] == 0) {
          if (int32_t bad = visit(s); bad >= 0) return bad;
        }
      }
      color[r] = 2;
      return -1;
    };
    for (int32_t r = 0; r < n; ++r) {
      if (color[r] != 0) continue;
      if (int32_t bad = visit(r); bad >= 0) {
        return InvalidArgument(fmt::format("grammar: rule '{}' is left-recursive (not supported)", g_->names_[bad]));
      }
    }
    // The matcher expands such chains recursively: bound their length.
    std::vector<int32_t> chain(n, -1);
    std::function<int32_t(int32_t)> longest = [&](int32_t r) -> int32_t {
      if (chain[r] >= 0) return chain[r];
      int32_t best = 0;
      for (int32_t s : first[r]) best = std::max(best, longest(s) + 1);
      return chain[r] = best;
    };
    for (int32_t r = 0; r < n; ++r) {
      if (longest(r) > kMaxChain) {
        return InvalidArgument(fmt::format("grammar: rules nest more than {} deep before matching a character",
                                           kMaxChain));
      }
    }
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::shared_ptr<Grammar> g_;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::string current_;  // the rule being parsed (names its helpers)
};

std::string GbnfLiteral(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::Parse(std::string_view gbnf, const std::string& root) {
  return GbnfParser(gbnf).Run(root);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  for (int32_t a : g_->rule(g_->root())) Expand(Stack{{a, 0}}, &stacks_);
  Dedupe(&stacks_);
}

void GrammarMatcher::Expand(Stack st, std::vector<Stack>* out) const {
  while (true) {
    if (st.empty()) {
      out->push_back(std::move(st));
      return;
    }
    Position& top = st.back();
    const auto& elems = g_->alternative(top.alt).elements;
    if (top.index == static_cast<int32_t>(elems.size())) {  // this alternative is done
      st.pop_back();
      continue;
    }
    const GrammarElement& e = elems[top.index];
    if (!e.is_rule) {
      out->push_back(std::move(st));
      return;
    }
    // Continue after the reference once the rule is matched; drop finished
    // frames first, so right recursion (repetition) keeps stacks short.
    ++top.index;
    while (!st.empty() && st.back().index == static_cast<int32_t>(g_->alternative(st.back().alt).elements.size())) {
      st.pop_back();
    }
    const std::vector<int32_t>& alts = g_->rule(e.rule);
    for (size_t k = 0; k < alts.size(); ++k) {
      Stack next = k + 1 == alts.size() ? std::move(st) : st;
      next.push_back({alts[k], 0});
      Expand(std::move(next), out);
    }
    return;
  }
}

void GrammarMatcher::Dedupe(std::vector<Stack>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
}

std::vector<GrammarMatcher::Stack> GrammarMatcher::Step(const std::vector<Stack>& stacks, uint32_t cp) const {
  std::vector<Stack> out;
  for (const Stack& st : stacks) {
    if (st.empty()) continue;
    const Position& top = st.back();
    if (!g_->alternative(top.alt).elements[top.index].Matches(cp)) continue;
    Stack next = st;
    ++next.back().index;
    Expand(std::move(next), &out);
  }
  Dedupe(&out);
  return out;
}

bool GrammarMatcher::Accept(uint32_t cp) {
  if (!partial_.empty()) return false;
  std::vector<Stack> next = Step(stacks_, cp);
  if (next.empty()) return false;
  stacks_ = std::move(next);
  return true;
}

bool GrammarMatcher::PartialPossible(const std::vector<Stack>& stacks, std::string_view partial) const {
  // The code points whose UTF-8 starts with these bytes: [lo, hi], from the
  // bits given with the rest all 0 / all 1, clamped to what n bytes may
  // encode (no overlong forms, nothing past U+10FFFF).
  const auto b0 = static_cast<uint8_t>(partial[0]);
  const int n = Utf8Length(b0);
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t lo = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  uint32_t hi = lo;
  for (int k = 1; k < n; ++k) {
    const bool given = k < static_cast<int>(partial.size());
    const uint32_t bits = given ? (static_cast<uint8_t>(partial[k]) & 0x3F) : 0;
    lo = (lo << 6) | bits;
    hi = (hi << 6) | (given ? bits : 0x3F);
  }
  lo = std::max(lo, kMin[n]);
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo > hi) return false;
  for (const Stack& st : stacks) {
    if (st.empty()) continue;
    const GrammarElement& e = g_->alternative(st.back().alt).elements[st.back().index];
    if (e.negated) {
      // Possible unless the excluded ranges cover all of [lo, hi].
      uint32_t next = lo;
      bool progressed = true;
      while (progressed && next <= hi) {
        progressed = false;
        for (const auto& [a, b] : e.ranges) {
          if (a <= next && b >= next) {
            next = b + 1;
            progressed = true;
          }
        }
      }
      if (next <= hi) return true;
      continue;
    }
    for (const auto& [a, b] : e.ranges) {
      if (a <= hi && b >= lo) return true;
    }
  }
  return false;
}

bool GrammarMatcher::Next(std::string_view bytes, GrammarMatcher* out) const {
  // The common case, one ASCII byte and nothing pending: one step, no copies.
  if (partial_.empty() && bytes.size() == 1 && static_cast<uint8_t>(bytes[0]) < 0x80) {
    std::vector<Stack> next = Step(stacks_, static_cast<uint8_t>(bytes[0]));
    if (next.empty()) return false;
    out->g_ = g_;
    out->stacks_ = std::move(next);
    out->partial_.clear();
    return true;
  }
  std::string text = partial_;
  text.append(bytes);
  const std::vector<Stack>* cur = &stacks_;
  std::vector<Stack> next;
  size_t i = 0;
  while (i < text.size()) {
    const int n = Utf8Length(static_cast<uint8_t>(text[i]));
    if (n == 0) return false;
    if (i + n > text.size()) {  // cut at the end: keep for the next call
      for (size_t k = i + 1; k < text.size(); ++k) {
        if ((static_cast<uint8_t>(text[k]) >> 6) != 2) return false;
      }
      if (!PartialPossible(*cur, std::string_view(text).substr(i))) return false;
      out->g_ = g_;
      out->stacks_ = cur == &stacks_ ? stacks_ : std::move(next);
      out->partial_ = text.substr(i);
      return true;
    }
    uint32_t cp;
    if (!DecodeUtf8(text, &i, &cp)) return false;
    next = Step(*cur, cp);
    if (next.empty()) return false;
    cur = &next;
  }
  out->g_ = g_;
  out->stacks_ = cur == &stacks_ ? stacks_ : std::move(next);
  out->partial_.clear();
  return true;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  GrammarMatcher next = *this;  // (out may not alias this: Next reads it throughout)
  if (!Next(bytes, &next)) return false;
  *this = std::move(next);
  return true;
}

bool GrammarMatcher::CanAccept(std::string_view bytes) const {
  GrammarMatcher out = *this;
  return Next(bytes, &out);
}

bool GrammarMatcher::CanEnd() const {
  if (!partial_.empty()) return false;
  for (const Stack& st : stacks_) {
    if (st.empty()) return true;
  }
  return false;
}

bool GrammarMatcher::MustEnd() const {
  if (!partial_.empty()) return false;
  for (const Stack& st : stacks_) {
    if (!st.empty()) return false;
  }
  return !stacks_.empty();
}

std::string GrammarMatcher::StateKey() const {
  std::string key = partial_;
  key.push_back('\0');
  for (const Stack& st : stacks_) {  // length-prefixed: unambiguous
    const auto n = static_cast<uint32_t>(st.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(st.data()), sizeof(Position) * st.size());
  }
  return key;
}

}  // namespace infera
