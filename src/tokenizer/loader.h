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
// Any supported tokenizer file or folder, chosen by content: GGUF (vocab-only
// is fine), tokenizer.json, vocab.json + merges.txt, SentencePiece .model,
// tiktoken rank files, llama2.c tokenizer .bin. `pre` overrides the
// pre-tokenizer of byte-level BPE files ("llama3", "qwen2", "gpt2", ...).
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromFile(const std::string& path, int n_vocab, const std::string& pre = "");

}  // namespace infera
