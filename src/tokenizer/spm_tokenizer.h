// SentencePiece-style BPE (llama.cpp's "llama" tokenizer model): the text
// gets a dummy-prefix space, spaces become U+2581, then adjacent symbols
// are merged greedily by highest piece score; pieces missing from the vocab
// fall back to <0xXX> byte tokens.
#pragma once

#include <array>

#include "tokenizer/tokenizer.h"

namespace infera {

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v);
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::vector<int32_t> EncodeContinuation(std::string_view text) const override;
  std::string TokenToPiece(int32_t id, bool render_special = false) const override;
  const char* GgufModelName() const override { return "llama"; }

 private:
  // Appends the tokens of one raw-text fragment (already space-escaped).
  void EncodeFragment(const std::string& text, std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view text, std::vector<int32_t>* out) const;
  std::vector<int32_t> EncodeImpl(std::string_view text, bool add_special, bool parse_special, bool dummy_prefix) const;
  // True when no piece joins a non-U+2581 character to a following U+2581:
  // then no merge crosses such a boundary and words can be merged one at a
  // time with the same result (and a small heap each).
  bool split_words_ = false;
};

}  // namespace infera
