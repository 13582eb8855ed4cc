// A token vocabulary with llama.cpp's token attributes. Built by the loaders
// (GGUF metadata, llama2.c tokenizer files) and shared by the algorithms.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infera {

// Values as stored in GGUF's tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Hash for heterogeneous lookup: find(std::string_view) without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Parses a "<0xAB>" byte-token piece (exactly two hex digits).
inline bool ParseByteToken(std::string_view p, unsigned* value) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return false;
  unsigned v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
    else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
    else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
    else return false;
  }
  *value = v;
  return true;
}

struct Vocab {
  std::vector<std::string> pieces;  // as stored (SPM: spaces as U+2581)
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index;  // piece -> id
  std::array<int32_t, 256> byte_token{};           // <0xXX> ids, -1 if absent
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  std::vector<int32_t> eog;  // every end-of-generation id (eos, eot, ...)
  // Fill-in-the-middle tokens of code models (-1: none): prefix, suffix,
  // middle, and the repository-level ones (padding, repository name, file
  // separator), which also end generation. From GGUF's fim_*_token_id keys,
  // else found by their text (Qwen's <|fim_prefix|>, StarCoder's
  // <fim_prefix>, CodeLlama's <PRE>, DeepSeek's, CodeGemma's, ...).
  struct Fim {
    int32_t pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
  } fim;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;
  std::string chat_template;  // tokenizer.chat_template / tokenizer_config.json, may be empty

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  int32_t Find(std::string_view piece) const {
    auto it = index.find(piece);
    return it == index.end() ? -1 : it->second;
  }
  bool IsEog(int32_t id) const;
  // Fills index and byte_token from pieces/types; adds well-known EOG tokens
  // (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, ...) present as control;
  // finds the FIM tokens not set (control or user-defined ones only).
  void Finalize();
};

}  // namespace infera
