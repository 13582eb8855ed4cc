// Reference quantizers of the K-quant super-block formats (Q2_K .. Q6_K, 256
// elements) and IQ4_NL (32 elements), following llama.cpp's reference
// algorithms (the ones llama-quantize uses without an importance matrix) so
// that files made by infera and by llama.cpp agree byte for byte.
#pragma once

#include <cstdint>

namespace infera::kquants {

// The element of x [n] with the largest magnitude, sign included (the first
// one on ties; 0 for an all-zero x).
float SignedAbsMax(const float* x, int n);

// x [256] -> one block.
void QuantizeQ2_K(const float* x, uint8_t* block);
void QuantizeQ3_K(const float* x, uint8_t* block);
void QuantizeQ4_K(const float* x, uint8_t* block);
void QuantizeQ5_K(const float* x, uint8_t* block);
void QuantizeQ6_K(const float* x, uint8_t* block);
// x [32] -> one block.
void QuantizeIq4Nl(const float* x, uint8_t* block);

}  // namespace infera::kquants
