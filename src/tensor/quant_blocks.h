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

// IQ4_XS block b (136 bytes): the scale of sub-block ib (0..7), d * (ls - 32)
// in f32; ls - 32 (-32..31) alone.
float Iq4XsSubScale(const uint8_t* b, int ib);
int Iq4XsSubScaleInt(const uint8_t* b, int ib);

// IQ3_S (256 elements, 110 bytes): {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32];
// u8 scales[4]}. Element 4k + j (k = 0..63, j = 0..3) is
// d * (1 + 2 * sc) * grid byte j of kIq3sGrid[qs[k] | bit k % 8 of qh[k / 8]
// << 8], negated where bit (4k + j) % 8 of signs[(4k + j) / 8] is set; sc is
// the low (even 32-group) or high (odd) nibble of scales[k / 16].
inline constexpr int kIq3sBlockBytes = 110;
extern const uint32_t kIq3sGrid[512];
// The scale of 32-group ib (0..7) of IQ3_S block b: d * (1 + 2 * sc), f32;
// 1 + 2 * sc (1..31) alone.
float Iq3sSubScale(const uint8_t* b, int ib);
int Iq3sSubScaleInt(const uint8_t* b, int ib);
// v [32]: the signed grid values (odd, -15..15) of 32-group ib of block b.
void Iq3sGroupValues(const uint8_t* b, int ib, int8_t* v);

// IQ2_XS (256 elements, 74 bytes): {f16 d; u16 qs[32]; u8 scales[8]}. qs[k]
// (k = 0..31) covers elements 8k .. 8k+7: bits 0..8 index kIq2xsGrid (8
// magnitude bytes 0x08 / 0x19 / 0x2b), bits 9..15 are the signs of elements
// 0..6 (bit i set: negative), element 7's sign makes the count of negatives
// even. 16-group g = k / 2 has scale d * (0.5 + sc) * 0.25, sc the low (even
// g) or high (odd g) nibble of scales[g / 2].
inline constexpr int kIq2xsBlockBytes = 74;
extern const uint64_t kIq2xsGrid[512];
// The scale of 16-group g (0..15) of IQ2_XS block b, f32; 1 + 2 * sc
// (1..31) alone: the scale is (d * (1 + 2 * sc)) * 0.125 exactly (powers of
// two commute with rounding).
float Iq2xsSubScale(const uint8_t* b, int g);
int Iq2xsSubScaleInt(const uint8_t* b, int g);
// v [16]: the signed grid values (+-8, +-25, +-43) of 16-group g of block b.
void Iq2xsGroupValues(const uint8_t* b, int g, int8_t* v);

// W8A8 (infera's type 201): Q8_0 blocks {f16 d; i8 qs[32]} in which every
// block of a row has the same d (the row's scale, max |w| / 127), so the
// kernels run whole rows of int8 with one scale. Rows must be at most
// kW8A8MaxRow elements: the int32 dot of a row (|u q| <= 255 * 127 per
// element, u = q + 128) cannot overflow.
inline constexpr int64_t kW8A8MaxRow = 65536;
// The first row of w [n_out rows of row_bytes] whose blocks' scales differ
// (bitwise), or -1 when every row has one scale.
int64_t FirstW8A8RowWithMixedScales(const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out);

// Q8_0_S24 (infera's type 200): Q8_0 with 2:4 sparsity. Per 32 elements
// {f16 d; u8 idx[4]; i8 qs[16]} (22 bytes, 5.5 bits per weight): 4-group g
// (elements 4g .. 4g+3) keeps two positions p0 < p1, stored in the nibble
// g % 2 of idx[g / 2] as p0 | p1 << 2; their values are d * qs[2g] and
// d * qs[2g + 1]; the other two elements are zero. Its values are exactly
// those of the Q8_0 block it was made from when that block was 2:4 sparse.
inline constexpr int kQ8_0S24Bytes = 22;
// Whether a Q8_0 block (34 bytes) has at most two nonzero quants per 4-group.
bool Q8_0BlockIs24(const uint8_t* q8_0);
// Q8_0 block -> Q8_0_S24 block; a group with more than two nonzero quants
// keeps its two largest |q| (ties: the lower position).
void CompressQ8_0Block24(const uint8_t* q8_0, uint8_t* s24);
// Q8_0_S24 block -> the Q8_0 block (34 bytes) it stands for.
void ExpandQ8_0S24Block(const uint8_t* s24, uint8_t* q8_0);

// Q4_0_S24 (infera's type 203): Q4_0 with 2:4 sparsity. Per 32 elements
// {f16 d; u8 idx[4]; u8 qs[8]} (14 bytes, 3.5 bits per weight): 4-group g
// keeps two positions p0 < p1, stored in idx as Q8_0_S24 does; their 4-bit
// values u (weight d * (u - 8), as Q4_0) are the nibbles 2g and 2g + 1 of qs
// (nibble i: the low half of qs[i / 2] for even i, else the high half); the
// other two elements are zero (u = 8). Its values are exactly those of the
// Q4_0 block it was made from when that block was 2:4 sparse.
inline constexpr int kQ4_0S24Bytes = 14;
// Whether a Q4_0 block (18 bytes) has at most two nonzero values (u != 8)
// per 4-group.
bool Q4_0BlockIs24(const uint8_t* q4_0);
// Q4_0 block -> Q4_0_S24 block; a group with more than two nonzero values
// keeps its two largest |u - 8| (ties: the lower position).
void CompressQ4_0Block24(const uint8_t* q4_0, uint8_t* s24);
// Q4_0_S24 block -> the Q4_0 block (18 bytes) it stands for.
void ExpandQ4_0S24Block(const uint8_t* s24, uint8_t* q4_0);

// Q8_0_S48 (infera's type 202): Q8_0 with 4:8 sparsity. Per 32 elements
// {f16 d; u8 mask[4]; i8 qs[16]} (22 bytes, 5.5 bits per weight): 8-group g
// (elements 8g .. 8g+7) keeps the positions whose bits are set in mask[g]
// (four of them as written); their values are d * qs[4g .. 4g+3] in position
// order; the other elements are zero. A mask with more than four bits set
// (a damaged file) keeps its four lowest positions.
inline constexpr int kQ8_0S48Bytes = 22;
// Whether a Q8_0 block (34 bytes) has at most four nonzero quants per 8-group.
bool Q8_0BlockIs48(const uint8_t* q8_0);
// Q8_0 block -> Q8_0_S48 block: each 8-group keeps its four largest |q|
// (ties: the lower position).
void CompressQ8_0Block48(const uint8_t* q8_0, uint8_t* s48);
// Q8_0_S48 block -> the Q8_0 block (34 bytes) it stands for.
void ExpandQ8_0S48Block(const uint8_t* s48, uint8_t* q8_0);

}  // namespace infera
