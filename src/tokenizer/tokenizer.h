// Tokenizer interface: text <-> token ids. Implementations are immutable
// after construction and safe to use from several threads.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace infera {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS per the vocab's add_bos/add_eos.
  // parse_special: control tokens written in the text (e.g. "<s>") become
  // those tokens; otherwise they are plain text. User-defined tokens always
  // match as whole tokens.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const = 0;

  // Text that continues an already-tokenized sequence (the next chat turn):
  // special tokens are recognized and no BOS or dummy-prefix space is added.
  virtual std::vector<int32_t> EncodeContinuation(std::string_view text) const { return Encode(text, false, true); }

  // The bytes a token stands for. Control tokens give "" unless
  // render_special. May be a partial UTF-8 sequence (byte tokens).
  virtual std::string TokenToPiece(int32_t id, bool render_special = false) const = 0;

  // GGUF's tokenizer.ggml.model for this algorithm: "llama" or "gpt2".
  virtual const char* GgufModelName() const = 0;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return vocab_.size(); }

  // Whole-sequence decoding; drops the dummy-prefix space at the start.
  std::string Decode(const std::vector<int32_t>& ids, bool render_special = false) const;

 protected:
  explicit Tokenizer(Vocab v);

  // A piece of input: a special token (token >= 0) or raw text.
  struct Fragment {
    int32_t token = -1;
    std::string_view text;
  };
  // Splits out control tokens (only when parse_special) and user-defined
  // tokens (always), longest match first, as llama.cpp does.
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;

  Vocab vocab_;

 private:
  std::vector<int32_t> special_;  // control / user-defined ids, longest text first
  std::array<bool, 256> special_first_byte_{};
};

// Streams detokenized text as valid UTF-8: bytes of a character split over
// several tokens are held back until the character is complete, and the
// dummy-prefix space of the first piece is removed. Not thread-safe.
class StreamDecoder {
 public:
  // at_start: true when nothing has been printed yet for this sequence (the
  // first piece's leading space is the tokenizer's dummy prefix).
  // render_special: control tokens are written out too (else they give "").
  StreamDecoder(const Tokenizer& tok, bool at_start, bool render_special = false);
  // Returns the text that is complete after appending token `id`.
  std::string Push(int32_t id);
  // Returns whatever is held back (invalid bytes become U+FFFD).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool at_start_;
  bool render_special_;
  std::string pending_;  // incomplete UTF-8 tail
};

}  // namespace infera
