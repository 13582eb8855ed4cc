// Byte-level BPE (GPT-2 family: gpt2, llama3, qwen2, falcon, starcoder,
// deepseek, ...). Text is split by the family's regex pre-tokenizer, each
// chunk's bytes are mapped to GPT-2's printable characters, then adjacent
// symbols are merged lowest rank first. Ranks come either from a merge list
// (GGUF tokenizer.ggml.merges, merges.txt, tokenizer.json) or, for tiktoken
// files, from the rank of the merged token itself.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace infera {

class BpeTokenizer : public Tokenizer {
 public:
  // `merges` in rank order; empty means "rank of the merged token" (tiktoken,
  // where token ids are ranks). ignore_merges: a chunk that is itself a
  // token is emitted whole (llama3 / tiktoken behaviour).
  BpeTokenizer(Vocab v, const std::vector<std::pair<std::string, std::string>>& merges,
               std::unique_ptr<PreTokenizer> pre, bool ignore_merges);

  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string TokenToPiece(int32_t id, bool render_special = false) const override;
  const char* GgufModelName() const override { return "gpt2"; }

 private:
  // Merge rank of (left, right), -1 if they do not merge. `scratch` avoids
  // an allocation per lookup.
  int Rank(std::string_view left, std::string_view right, std::string* scratch) const;
  void EncodeWord(const std::string& mapped, std::vector<int32_t>* out) const;

  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_;
  bool rank_by_token_;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> merge_rank_;  // left + '\0' + right -> rank
};

}  // namespace infera
