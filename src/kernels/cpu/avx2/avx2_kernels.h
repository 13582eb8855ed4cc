#pragma once
#include "kernels/kernels.h"
namespace infera::avx2 {
// Overrides the entries this ISA speeds up. Compiled with -mavx2 -mfma -mf16c;
// call only when the CPU supports them.
void Fill(KernelTable* t);
// The tiled attention kernel (avx2_flash.cc; Fill calls it).
void FillFlash(KernelTable* t);
// The bf16-product attention kernel (avx2_flash_bf16.cc; Fill calls it).
void FillFlashBf16(KernelTable* t);
}  // namespace infera::avx2
