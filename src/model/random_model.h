// Random-weight models of standard shapes, written as GGUF: the build's
// placeholder default model and the benchmark models of docs/performance.md.
#pragma once

#include <string>

#include "infera/status.h"
#include "model/config.h"
#include "tensor/dtype.h"
#include "tokenizer/vocab.h"

namespace infera {

// "tiny" (the placeholder default), "m360" (SmolLM2-360M body with a 32000
// vocab), "m1b" (TinyLlama-1.1B). ok=false for unknown names.
StatusOr<ModelConfig> RandomModelShape(const std::string& name);

// A small SentencePiece-style vocab (<unk>, <s>, </s>, 256 byte tokens,
// printable ASCII and common English words) padded to n_vocab entries.
Vocab MakeSyntheticVocab(int n_vocab);

// Writes a GGUF with weights ~ N(0, 0.02) (norms = 1) of `type` (f32, f16
// or bf16; norms always f32). `vocab` supplies the tokenizer metadata and
// must have config.n_vocab entries.
Status WriteRandomGguf(const ModelConfig& config, const Vocab& vocab, DType type, uint64_t seed,
                       const std::string& path);

// Shared by convert: writes the standard llama.cpp metadata for `config`.
class GgufWriter;
void WriteModelMetadata(const ModelConfig& c, DType file_type, GgufWriter* w);
void WriteTokenizerMetadata(const Vocab& v, GgufWriter* w);

}  // namespace infera
