#pragma once
#include "kernels/kernels.h"
namespace infera::avx512vnni {
// The quantized matmul on packed weights with vpdpbusd. Compiled with -mavx512vnni; call only when
// the CPU has AVX512_VNNI.
void Fill(KernelTable* t);
}  // namespace infera::avx512vnni
