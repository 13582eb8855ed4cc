// Context-free grammars in llama.cpp's GBNF notation, and a matcher that
// follows text through them one code point at a time: the core of
// constrained decoding (grammar, JSON schema, choices).
//
//   root   ::= "yes" | "no" ws item*       rules: name ::= alternatives
//   item   ::= [a-z0-9_]+ ("," [^\n]?){0,2} literals, classes, . (any), groups,
//   ws     ::= [ \t\n]*                     * + ? {m} {m,} {m,n}, # comments
//
// A Grammar is immutable once parsed (thread-safe to share). Repetitions and
// groups become helper rules, so a rule is a list of alternatives and an
// alternative a sequence of elements: a code point class or a rule
// reference. Left-recursive grammars are refused (the matcher would loop).
//
// GrammarMatcher: the set of pushdown stacks (a non-deterministic parse)
// reachable after the text so far. Each stack's top is a code point class
// to match next; an empty stack means the text may end here. Copyable
// value; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/status.h"

namespace infera {

struct GrammarElement {
  // A class of code points (ranges [lo, hi], negated: any code point not in
  // them), or a reference to rule `rule`.
  bool is_rule = false;
  int32_t rule = -1;
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool Matches(uint32_t cp) const;
};

class Grammar {
 public:
  // Parses GBNF text; `root` names the start rule.
  static StatusOr<std::shared_ptr<const Grammar>> Parse(std::string_view gbnf, const std::string& root = "root");

  struct Alternative {
    std::vector<GrammarElement> elements;
  };
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  // The alternatives (indices into alternatives()) of rule r.
  const std::vector<int32_t>& rule(int32_t r) const { return rules_[r]; }
  const Alternative& alternative(int32_t a) const { return alts_[a]; }
  int32_t root() const { return root_; }
  const std::string& rule_name(int32_t r) const { return names_[r]; }

 private:
  friend class GbnfParser;
  std::vector<std::vector<int32_t>> rules_;  // rule -> alternatives
  std::vector<Alternative> alts_;
  std::vector<std::string> names_;
  int32_t root_ = -1;
};

// A GBNF string literal that matches the bytes of `s` exactly (quotes,
// backslashes and control bytes escaped; UTF-8 passes through).
std::string GbnfLiteral(std::string_view s);

class GrammarMatcher {
 public:
  // At the start of the grammar's root rule.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Consumes one code point; false (and the state unchanged) if no parse
  // allows it.
  bool Accept(uint32_t cp);
  // Consumes UTF-8 text (a token's bytes). A code point cut at the end is
  // kept and completed by the next call. False (state unchanged) if no parse
  // allows the text, or its bytes are not UTF-8.
  bool AcceptBytes(std::string_view bytes);
  // The state after `bytes` into *out (which must not be this), leaving
  // this one alone; false (out unspecified) if they are refused.
  bool Next(std::string_view bytes, GrammarMatcher* out) const;
  // Whether AcceptBytes(bytes) would succeed, without changing the state.
  bool CanAccept(std::string_view bytes) const;
  // Whether the text so far is a complete sentence of the grammar.
  bool CanEnd() const;
  // Whether no further text can be accepted (every parse is complete).
  bool MustEnd() const;
  bool dead() const { return stacks_.empty(); }
  // A key for the state (equal keys: equal futures), for caching masks.
  std::string StateKey() const;

  // A stack position: element `index` of alternative `alt`.
  struct Position {
    int32_t alt;
    int32_t index;
    bool operator==(const Position&) const = default;
    auto operator<=>(const Position&) const = default;
  };
  using Stack = std::vector<Position>;

 private:
  // Pushes onto `out` every stack reachable from `stack` whose top is a
  // code point class (or that is empty), expanding rule references.
  void Expand(Stack stack, std::vector<Stack>* out) const;
  // The stacks after `cp` from `stacks`.
  std::vector<Stack> Step(const std::vector<Stack>& stacks, uint32_t cp) const;
  static void Dedupe(std::vector<Stack>* stacks);
  // Whether some stack could accept a code point that starts with the
  // pending partial UTF-8 bytes.
  bool PartialPossible(const std::vector<Stack>& stacks, std::string_view partial) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
  std::string partial_;  // bytes of a code point cut at the end of the last AcceptBytes
};

}  // namespace infera
