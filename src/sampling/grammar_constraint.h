// Token-level grammar constraint: which tokens of the vocabulary may come
// next so that the text stays a prefix of a sentence of the grammar, as a
// mask over the logits, and the grammar state advanced by the sampled token.
//
// VocabTrie: the vocabulary's token bytes as a byte trie, built once per
// tokenizer and shared (immutable; thread-safe). GrammarConstraint walks the
// trie from the current grammar state, pruning every subtree whose prefix
// the grammar refuses, so a step costs in proportion to the viable prefixes
// rather than the vocabulary; the allowed set is cached per grammar state
// (JSON strings, lists and whitespace revisit the same states). One per
// request; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sampling/grammar.h"

namespace infera {

class VocabTrie {
 public:
  // pieces[id]: the bytes token `id` adds to the text ("" for control tokens,
  // which a grammar never allows).
  explicit VocabTrie(std::vector<std::string> pieces);
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }

  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;                        // tokens whose bytes end here
  };
  const Node& node(int32_t i) const { return nodes_[i]; }

 private:
  std::vector<std::string> pieces_;
  std::vector<Node> nodes_;  // [0] is the root
};

class GrammarConstraint {
 public:
  // eog: the end-of-generation tokens (allowed where the text may end).
  // strip_first_space: the first piece's leading space is a tokenizer's
  // dummy prefix that the output drops (StreamDecoder), so the grammar must
  // not see it either.
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> vocab,
                    std::vector<int32_t> eog, bool strip_first_space);

  // logits[t] = -inf for every token not allowed next. Returns how many are
  // allowed (0: the grammar is stuck; end the sequence).
  int32_t Mask(float* logits, int32_t n_vocab);
  // Advances by the sampled token (an end-of-generation token: nothing to
  // advance). False if the grammar does not allow it.
  bool Advance(int32_t token);
  // The text is a complete sentence and nothing may follow.
  bool MustEnd() const { return m_.MustEnd(); }
  bool CanEnd() const { return m_.CanEnd(); }
  size_t cached_states() const { return cache_.size(); }

 private:
  // allowed[t] (1: allowed) for the current state.
  const std::vector<uint8_t>& Allowed();
  void Walk(int32_t node, const GrammarMatcher& m, std::vector<uint8_t>* allowed) const;
  bool IsEog(int32_t t) const;

  GrammarMatcher m_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<int32_t> eog_;
  bool at_start_;  // strip the next piece's leading space
  std::unordered_map<std::string, std::vector<uint8_t>> cache_;
};

}  // namespace infera
