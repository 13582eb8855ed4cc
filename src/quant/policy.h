// Which type each tensor gets when quantizing a model: the target type or a
// llama.cpp preset (Q4_K_M, ...), llama.cpp's rules for the output tensor and
// for sensitive layers, and its fallback when a row length does not fit the
// type's block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/dtype.h"

namespace infera {

struct QuantTarget {
  std::string name;    // as given: "q4_k_m", "q8_0", ...
  DType base;          // the type of most weight matrices
  uint32_t ftype;      // llama.cpp's general.file_type
  bool mixture = false;  // a _S/_M preset with per-layer rules
};

// Any writable dtype name or one of q3_k_m, q4_k_s, q4_k_m, q5_k_s, q5_k_m.
std::optional<QuantTarget> ParseQuantTarget(const std::string& name);

// The type of 2-D weight `name` (GGUF name, "blk.N.attn_v.weight", ...) with
// rows of n_in elements, in a model of n_layer layers. `output_name` is the
// tensor that produces the logits (output.weight, or token_embd.weight when
// tied). `pure`: no rules, only the shape fallback.
DType ChooseTensorType(const QuantTarget& t, const std::string& name, int64_t n_in, int n_layer,
                       const std::string& output_name, bool pure);

// llama.cpp's fallback when n_in is not a multiple of t's block: Q2_K/Q3_K ->
// IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (then F16 if still
// incompatible).
DType FallbackForShape(DType t, int64_t n_in);

}  // namespace infera
