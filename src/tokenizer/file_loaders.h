// Loaders for tokenizer files beyond GGUF metadata and llama2.c.
#pragma once

#include <memory>
#include <string>

#include "infera/status.h"
#include "tokenizer/tokenizer.h"

namespace infera {

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromSentencePiece(const std::string& path);
// Llama-3's tokenizer.model, qwen.tiktoken: "base64 rank" per line; the
// family's special tokens are appended. pre_override: pre-tokenizer name.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTiktoken(const std::string& path, const std::string& pre_override);
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromVocabMerges(const std::string& vocab_path, const std::string& merges_path,
                                                             const std::string& pre_override);
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTokenizerJson(const std::string& path, const std::string& pre_override);

}  // namespace infera
