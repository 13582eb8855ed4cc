#pragma once
#include "kernels/kernels.h"
namespace infera::avx512 {
// Overrides the entries this ISA speeds up. Compiled with AVX-512 F/BW/VL/DQ;
// call only when the CPU supports them.
void Fill(KernelTable* t);
// The tiled attention kernel (avx512_flash.cc); called by Fill.
void FillFlash(KernelTable* t);
}  // namespace infera::avx512
