// Quantizers of the GGUF block formats, producing exactly the bytes of
// llama.cpp's quantizers (its reference ones, used by llama-quantize without
// an importance matrix, and its importance-weighted ones), so files made by
// infera and by llama.cpp agree.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace infera {

bool CanQuantize(DType t);
// src [n] -> dst (RowBytes(t, n) bytes). n must be a multiple of the block.
// importance [n]: the imatrix entry of the row's tensor (mean x^2 per input
// column), or null for the reference algorithms. Types without a weighted
// algorithm in llama.cpp (Q8_0, F16, ...) ignore it.
void QuantizeRow(DType t, const float* src, uint8_t* dst, int64_t n, const float* importance = nullptr);
// One 32-element block of Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 from its codes as
// stored (Q4_0 / Q4_1: 0..15, Q5_0 / Q5_1: 0..31, Q8_0: -128..127), scale d
// and, for Q4_1 / Q5_1, min m (both rounded to f16 here).
void PackLegacyBlock(DType t, const int8_t* codes, float d, float m, uint8_t* block);

// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a file mostly of type t.
uint32_t LlamaFileType(DType t);

}  // namespace infera
