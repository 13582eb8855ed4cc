// GGUF block formats: reference dequantization (the oracle for every fast
// kernel). Layouts are llama.cpp's (ggml-common.h): for a row of n elements,
// n / block_size blocks of type_size bytes each, little-endian halves.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace infera {

// Whether DequantizeRow supports `t`.
bool CanDequantize(DType t);

// dst [n] = the values of a row of n elements of type t starting at src.
// n must be a multiple of the type's block size.
void DequantizeRow(DType t, const uint8_t* src, float* dst, int64_t n);

// The 16 signed levels of IQ4_NL (non-linear 4-bit).
extern const int8_t kIq4nlValues[16];

}  // namespace infera
