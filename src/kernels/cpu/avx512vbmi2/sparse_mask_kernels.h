#pragma once
#include "kernels/kernels.h"
namespace infera::avx512vbmi2 {
// The quantized matmul on the sparse-mask layout (PackFormat::sparse_mask):
// vpexpandb + vpdpbusd. Compiled with -mavx512vbmi2 -mavx512vnni; call only
// when the CPU has both.
void Fill(KernelTable* t);
}  // namespace infera::avx512vbmi2
