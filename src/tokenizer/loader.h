// Builds a tokenizer from a model's GGUF metadata or from a separate
// tokenizer file (vocab-only GGUF, llama2.c tokenizer .bin).
#pragma once

#include <memory>
#include <string>

#include "formats/gguf_reader.h"
#include "infera/status.h"
#include "tokenizer/tokenizer.h"

namespace infera {

// pre_override: a pre-tokenizer name replacing tokenizer.ggml.pre.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& f, const std::string& pre_override = "");
// llama2.c tokenizer file; n_vocab < 0 reads every entry.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromLlama2c(const std::string& path, int n_vocab);
// Any supported tokenizer file, chosen by content.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromFile(const std::string& path, int n_vocab);

}  // namespace infera
