#pragma once
#include "kernels/kernels.h"
namespace infera::avx512vnni {
// The quantized matmul on packed weights with vpdpbusd. Compiled with -mavx512vnni; call only when
// the CPU has AVX512_VNNI.
void Fill(KernelTable* t);
// The tiled attention kernel with vpdpbusd for int8 caches (vnni_flash.cc);
// called by Fill.
void FillFlash(KernelTable* t);
}  // namespace infera::avx512vnni
