// Quantizers of the K-quant super-block formats (Q2_K .. Q6_K, 256 elements)
// and IQ4_NL (32 elements), following llama.cpp's algorithms so that files
// made by infera and by llama.cpp agree byte for byte: with qw null, the
// reference ones llama-quantize uses without an importance matrix; with qw
// (the block's slice of the imatrix: per input column mean x^2), its
// importance-weighted ones.
#pragma once

#include <cstdint>

namespace infera::kquants {

// x [256], qw [256] or null -> one block.
void QuantizeQ2_K(const float* x, const float* qw, uint8_t* block);
void QuantizeQ3_K(const float* x, const float* qw, uint8_t* block);
void QuantizeQ4_K(const float* x, const float* qw, uint8_t* block);
void QuantizeQ5_K(const float* x, const float* qw, uint8_t* block);
void QuantizeQ6_K(const float* x, const float* qw, uint8_t* block);
// x [32], qw [32] or null -> one block.
void QuantizeIq4Nl(const float* x, const float* qw, uint8_t* block);
// x [256], qw [256] or null -> one IQ4_XS block.
void QuantizeIq4Xs(const float* x, const float* qw, uint8_t* block);

}  // namespace infera::kquants
