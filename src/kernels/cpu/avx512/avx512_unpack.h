#pragma once
#include "kernels/kernels.h"
namespace infera::avx512 {
// AVX-512BW unpackers for the most used types (Q4_0, Q8_0, Q4_K, Q6_K); they
// write exactly what the scalar unpackers write.
void FillUnpackers(KernelTable* t);
}  // namespace infera::avx512
