#pragma once
#include "kernels/kernels.h"
namespace infera::avx512bf16 {
// Overrides the entries AVX512-BF16 speeds up (the bf16 attention and matmul kernels).
// Compiled with AVX-512 F/BW/VL/DQ and BF16; call only when the CPU
// supports them.
void Fill(KernelTable* t);
// The float-weight matmuls with bf16 products (bf16_matmul.cc); Fill calls it.
void FillMatmul(KernelTable* t);
}  // namespace infera::avx512bf16
