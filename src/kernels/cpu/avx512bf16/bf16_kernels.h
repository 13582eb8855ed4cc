#pragma once
#include "kernels/kernels.h"
namespace infera::avx512bf16 {
// Overrides the entries AVX512-BF16 speeds up (the bf16 attention kernel).
// Compiled with AVX-512 F/BW/VL/DQ and BF16; call only when the CPU
// supports them.
void Fill(KernelTable* t);
}  // namespace infera::avx512bf16
