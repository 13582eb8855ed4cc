// A token vocabulary with llama.cpp's token attributes. Built by the loaders
// (GGUF metadata, llama2.c tokenizer files) and shared by the algorithms.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace infera {

// Values as stored in GGUF's tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

struct Vocab {
  std::vector<std::string> pieces;  // as stored (SPM: spaces as U+2581)
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t> index;  // piece -> id
  std::array<int32_t, 256> byte_token{};           // <0xXX> ids, -1 if absent
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  std::vector<int32_t> eog;  // every end-of-generation id (eos, eot, ...)
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  int32_t Find(const std::string& piece) const {
    auto it = index.find(piece);
    return it == index.end() ? -1 : it->second;
  }
  bool IsEog(int32_t id) const;
  // Fills index and byte_token from pieces/types; adds well-known EOG tokens
  // (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, ...) present as control.
  void Finalize();
};

}  // namespace infera
