// The tiled attention chunk kernel of the AVX2 level (flash_chunk256.h).
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/flash_chunk256.h"

namespace infera::avx2 {

void FillFlash(KernelTable* t) {
  t->flash_chunk = FlashChunkAvx2;
  t->flash_merge = FlashMergeGeneric;  // inline FMAs in ExpNonPositive (no libm call)
  t->flash_variant = "avx2-tiled";
}

}  // namespace infera::avx2
