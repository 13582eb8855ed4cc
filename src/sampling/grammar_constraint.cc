#include "sampling/grammar_constraint.h"

#include <algorithm>
#include <limits>

namespace infera {

namespace {
constexpr size_t kMaxCachedStates = 4096;
}  // namespace

VocabTrie::VocabTrie(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
  nodes_.emplace_back();
  for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
    const std::string& p = pieces_[id];
    if (p.empty()) continue;
    int32_t at = 0;
    for (char ch : p) {
      const auto b = static_cast<uint8_t>(ch);
      auto& kids = nodes_[at].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
      if (it != kids.end() && it->first == b) {
        at = it->second;
      } else {
        const auto fresh = static_cast<int32_t>(nodes_.size());
        kids.insert(it, {b, fresh});
        nodes_.emplace_back();  // (invalidates `kids`; not used after)
        at = fresh;
      }
    }
    nodes_[at].tokens.push_back(id);
  }
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> vocab,
                                     std::vector<int32_t> eog, bool strip_first_space)
    : m_(std::move(grammar)), vocab_(std::move(vocab)), eog_(std::move(eog)), at_start_(strip_first_space) {}

bool GrammarConstraint::IsEog(int32_t t) const { return std::find(eog_.begin(), eog_.end(), t) != eog_.end(); }

void GrammarConstraint::Walk(int32_t node, const GrammarMatcher& m, std::vector<uint8_t>* allowed) const {
  const VocabTrie::Node& n = vocab_->node(node);
  for (int32_t t : n.tokens) (*allowed)[t] = 1;
  GrammarMatcher next = m;  // (one per depth, reused for every child)
  for (const auto& [b, child] : n.children) {
    const char c = static_cast<char>(b);
    if (m.Next(std::string_view(&c, 1), &next)) Walk(child, next, allowed);
  }
}

const std::vector<uint8_t>& GrammarConstraint::Allowed() {
  std::string key = m_.StateKey();
  key.push_back(at_start_ ? 's' : '-');
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::vector<uint8_t> allowed(vocab_->n_vocab(), 0);
  const VocabTrie::Node& root = vocab_->node(0);
  GrammarMatcher next = m_;
  if (at_start_) {
    // Pieces with a leading space: matched without it (the output drops
    // it); a lone space is the dummy prefix alone: it adds nothing, as in
    // the decoder, and is allowed.
    for (const auto& [b, child] : root.children) {
      if (b == ' ') {
        const VocabTrie::Node& sp = vocab_->node(child);
        for (int32_t t : sp.tokens) allowed[t] = 1;
        for (const auto& [b2, grand] : sp.children) {
          const char c = static_cast<char>(b2);
          if (m_.Next(std::string_view(&c, 1), &next)) Walk(grand, next, &allowed);
        }
      } else {
        const char c = static_cast<char>(b);
        if (m_.Next(std::string_view(&c, 1), &next)) Walk(child, next, &allowed);
      }
    }
  } else {
    for (const auto& [b, child] : root.children) {
      const char c = static_cast<char>(b);
      if (m_.Next(std::string_view(&c, 1), &next)) Walk(child, next, &allowed);
    }
  }
  if (cache_.size() >= kMaxCachedStates) cache_.clear();
  return cache_.emplace(std::move(key), std::move(allowed)).first->second;
}

int32_t GrammarConstraint::Mask(float* logits, int32_t n_vocab) {
  const std::vector<uint8_t>& allowed = Allowed();
  const bool can_end = m_.CanEnd();
  int32_t n = 0;
  for (int32_t t = 0; t < n_vocab; ++t) {
    const bool ok = IsEog(t) ? can_end : t < static_cast<int32_t>(allowed.size()) && allowed[t] != 0;
    if (ok && logits[t] != -std::numeric_limits<float>::infinity()) {
      ++n;
    } else {
      logits[t] = -std::numeric_limits<float>::infinity();
    }
  }
  return n;
}

bool GrammarConstraint::Advance(int32_t token) {
  if (IsEog(token)) return m_.CanEnd();
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  std::string_view piece = vocab_->piece(token);
  if (piece.empty()) return false;
  if (at_start_ && piece[0] == ' ') {
    piece.remove_prefix(1);
    if (piece.empty()) {  // the dummy prefix alone: no text
      at_start_ = false;
      return true;
    }
  }
  if (!m_.AcceptBytes(piece)) return false;
  at_start_ = false;
  return true;
}

}  // namespace infera
