// Quantizers of the K-quant super-block formats (Q2_K .. Q6_K, 256 elements)
// and IQ4_NL (32 elements), following llama.cpp's algorithms so that files
// made by infera and by llama.cpp agree byte for byte: with qw null, the
// reference ones llama-quantize uses without an importance matrix; with qw
// (the block's slice of the imatrix: per input column mean x^2), its
// importance-weighted ones.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

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
// x [256], qw [256] or null -> one IQ3_S block (iq3s_quantize.cc).
void QuantizeIq3s(const float* x, const float* qw, uint8_t* block);
// x [256], qw [256] or null -> one IQ2_XS block (iq2xs_quantize.cc).
void QuantizeIq2Xs(const float* x, const float* qw, uint8_t* block);

// Code packers: L [256] codes (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K
// 0..31, Q6_K 0..63) into the block's quant bits; the scales are untouched.
void PackCodesQ2_K(const uint8_t* L, uint8_t* block);
void PackCodesQ3_K(const uint8_t* L, uint8_t* block);
void PackCodesQ4_K(const uint8_t* L, uint8_t* block);
void PackCodesQ5_K(const uint8_t* L, uint8_t* block);
void PackCodesQ6_K(const uint8_t* L, uint8_t* block);

// Code grids of fitted blocks, for quantizers that choose codes themselves
// against fixed block scales (GPTQ): the K-quants, IQ4 and the legacy
// 32-blocks (Q4_0 .. Q8_0, fitted by QuantizeRow's imatrix algorithms). A block of
// `block` elements has sub-blocks of `sub`; in sub-block j element values are
// a_j * level(code) + b_j, codes 0 .. n_codes - 1, level(code) = code - zero
// (uniform types) or table[code] (IQ4_NL / IQ4_XS).
struct CodeGridShape {
  int block = 0;  // 0: the type has no code grid
  int sub = 0;
  int n_codes = 0;
  int zero = 0;
  const int8_t* table = nullptr;
};
struct SubGrid {
  float a = 0, b = 0;
};
// Q2_K .. Q6_K, IQ4_NL, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (codes 0..255
// for -128..127); else block 0.
CodeGridShape CodeGridShapeOf(DType t);
// The type's quantizer (above): scales and codes of x [block], importances
// qw [block] or null.
void FitBlock(DType t, const float* x, const float* qw, uint8_t* block);
// grids [block / sub]: each sub-block's (a, b) as the block stores them.
void ReadSubGrids(DType t, const uint8_t* block, SubGrid* grids);
// The code nearest v, rounded as the type's quantizer rounds (a zero scale:
// the zero code).
int NearestCode(const CodeGridShape& s, const SubGrid& g, float v);
double CodeValue(const CodeGridShape& s, const SubGrid& g, int code);
// codes [block] into block's quant bits, its scales kept.
void WriteCodes(DType t, const uint8_t* codes, uint8_t* block);

}  // namespace infera::kquants
