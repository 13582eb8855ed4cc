#pragma once
#include "kernels/kernels.h"
namespace infera::avxvnni {
// The quantized matmul with AVX-VNNI (256-bit vpdpbusd: client CPUs without
// AVX-512, e.g. Alder Lake; also present on AVX-512 CPUs, which use their own
// kernel). Compiled with -mavx2 -mfma -mf16c -mavxvnni; call only when the CPU
// has AVX-VNNI.
void Fill(KernelTable* t);
// The tiled attention kernel with vpdpbusd for int8 caches
// (avxvnni_flash.cc); called by Fill.
void FillFlash(KernelTable* t);
}  // namespace infera::avxvnni
