// The tiled attention kernel with bf16 products on VDPBF16PS
// (avx512/flash_bf16_512.h).
#include "kernels/cpu/avx512/flash_bf16_512.h"
#include "kernels/cpu/avx512bf16/bf16_kernels.h"

namespace infera::avx512bf16 {

void Fill(KernelTable* t) {
  t->flash_chunk_bf16 = flash_bf16_512::FlashChunkBf16;
  t->flash_bf16_variant = "avx512bf16-tiled";
  FillMatmul(t);
}

}  // namespace infera::avx512bf16
