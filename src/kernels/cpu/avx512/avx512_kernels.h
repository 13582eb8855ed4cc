#pragma once
#include "kernels/kernels.h"
namespace infera::avx512 {
// Overrides the entries this ISA speeds up. Compiled with AVX-512 F/BW/VL/DQ;
// call only when the CPU supports them.
void Fill(KernelTable* t);
// The tiled attention kernel (avx512_flash.cc); called by Fill.
void FillFlash(KernelTable* t);
// The bf16 form of the tiled attention kernel with the bf16 instructions
// emulated (avx512_flash_bf16.cc); called by FillFlash.
void FillFlashBf16(KernelTable* t);
}  // namespace infera::avx512
