// Reader for SentencePiece's ModelProto (.model files): pieces, scores,
// types, special ids and the normalizer's add_dummy_prefix. A minimal,
// bounds-checked protobuf wire-format decoder; unknown fields are skipped.
#pragma once

#include <string>

#include "infera/status.h"
#include "tokenizer/vocab.h"

namespace infera {

struct SentencePieceModel {
  Vocab vocab;
  int model_type = 0;  // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false;
};

StatusOr<SentencePieceModel> ParseSentencePieceModel(const std::string& bytes, const std::string& name);

}  // namespace infera
