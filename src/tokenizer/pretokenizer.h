// Regex pre-tokenizer of the byte-level BPE families (PCRE2, Unicode mode).
// A list of patterns is applied in order, llama.cpp-style: each pattern
// splits every current chunk into its matches and the unmatched text between
// them (which stays as chunks of its own).
//
// Immutable after construction; Split() is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/status.h"

namespace infera {

class PreTokenizer {
 public:
  static StatusOr<std::unique_ptr<PreTokenizer>> FromPatterns(const std::vector<std::string>& patterns);
  // Presets by llama.cpp's tokenizer.ggml.pre names ("llama-bpe", "qwen2",
  // "gpt-2", "falcon", "starcoder", "mpt", "deepseek-coder", ...).
  static StatusOr<std::unique_ptr<PreTokenizer>> FromPresetName(const std::string& name);
  static std::vector<std::string> PresetNames();
  ~PreTokenizer();

  // `text` must be valid UTF-8. Returns chunks as views into text.
  std::vector<std::string_view> Split(std::string_view text) const;

 private:
  PreTokenizer() = default;
  struct Compiled;
  std::vector<Compiled*> regexes_;
};

}  // namespace infera
