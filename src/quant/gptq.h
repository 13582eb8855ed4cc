// GPTQ (Frantar et al., 2022): quantizes a weight matrix column by column,
// feeding each column's rounding error forward into the columns not yet
// quantized through the inverse Hessian of the layer's calibration inputs
// (Cholesky of H^-1, lazy updates in blocks of columns). The result is
// stored in standard GGUF blocks:
//  - legacy 32-blocks: symmetric groups -> Q4_0 / Q5_0 / Q8_0, asymmetric ->
//    Q4_1 / Q5_1; a group of 64 or 128 columns repeats its scale in each of
//    its blocks. Group parameters: symmetric d = (signed max of the group) /
//    -nmax (Q8_0: max|w| / 127), asymmetric d = (max - min) / levels,
//    m = min, both rounded to f16 as the block stores them; codes round to
//    nearest (ties to even).
//  - K-quants (Q2_K .. Q6_K) and IQ4_NL / IQ4_XS: the group is the type's
//    block (256 or 32 columns). Its scales (super-block d / dmin and the
//    quantized sub-block scales and mins) are fitted by the type's own
//    importance-weighted quantizer (llama.cpp's, with the Hessian diagonal as
//    the importance matrix) on the block's weights as they are when GPTQ
//    reaches its first column; then every code is chosen by GPTQ against
//    those fixed scales. The approximation: the scales are never refitted to
//    the codes GPTQ finally picks (refitting would undo the error feedback
//    already spent on later columns).
// Without act-order a group's parameters come from its current (already
// error-corrected) weights when its first column is reached, as the paper's
// code does; with act-order (columns in order of decreasing H diagonal) they
// come from the original weights ("static groups"), since the blocks of a
// GGUF tensor follow the original column order.
//
// Pure math; no model knowledge. The numpy reference in
// tests/reference/quant_reference.py follows the same conventions for the
// legacy types.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/status.h"
#include "tensor/dtype.h"

namespace infera {

struct GptqOptions {
  DType type = DType::kQ4_0;  // see GptqSupports
  int group = 32;             // legacy types' columns sharing a scale: 32, 64 or 128
  // Legacy types with group 32: fit each block's scale with the type's
  // importance-weighted quantizer (as the K-quants always do) instead of
  // min / max.
  bool weighted_scales = false;
  bool act_order = false;
  double damp = 0.01;         // H += damp * mean(diag H) * I
  int block_size = 128;       // columns per lazy-update block
};

// Whether GPTQ can write type t.
bool GptqSupports(DType t);
// The columns that share parameters for type t: the K-quant / IQ4 block, else
// `group`. A matrix's columns must be a multiple.
int64_t GptqGroupColumns(DType t, int group);

// w [rows, cols] row-major (GGUF [n_out, n_in]); h [cols, cols] = sum over
// calibration tokens of x x^T (its scale does not matter). On success w
// holds the dequantized weights and out [rows * RowBytes(type, cols)] the
// blocks, and w the blocks dequantized. Inputs never active (zero diagonal) get zero weights. Fails if the
// damped Hessian is not positive definite or the options do not fit.
Status Gptq(float* w, int64_t rows, int64_t cols, std::vector<double> h, const GptqOptions& opt, uint8_t* out,
            int threads = 1);

}  // namespace infera
