// llama2.c checkpoints: the legacy "version 0" layout (7 x int32 header, then
// fp32 arrays) and export.py's version 1 ("ak42" magic, 256-byte header).
// Tensors are exposed with GGUF names (blk.N.attn_q.weight, ...) pointing
// into the memory map; llama2.c's Q/K rows are already in GGUF's rotary order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/mmap_file.h"
#include "formats/tensor_view.h"
#include "infera/status.h"

namespace infera {

struct Llama2cHeader {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0;
  int32_t vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int version = 0;
};

class Llama2cCheckpoint {
 public:
  static StatusOr<std::unique_ptr<Llama2cCheckpoint>> Open(const std::string& path);
  static StatusOr<std::unique_ptr<Llama2cCheckpoint>> Parse(const uint8_t* data, size_t size,
                                                            const std::string& name);
  const Llama2cHeader& header() const { return header_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }

 private:
  std::unique_ptr<MappedFile> map_;
  Llama2cHeader header_;
  std::vector<TensorView> tensors_;
};

// A llama2.c tokenizer file: int32 max_token_length, then per token
// {f32 score, int32 len, len bytes}. `vocab_size` < 0 reads until the end.
struct Llama2cVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};
StatusOr<Llama2cVocab> ReadLlama2cTokenizer(const std::string& path, int vocab_size);
StatusOr<Llama2cVocab> ParseLlama2cTokenizer(const uint8_t* data, size_t size,
                                             const std::string& name, int vocab_size);

}  // namespace infera
