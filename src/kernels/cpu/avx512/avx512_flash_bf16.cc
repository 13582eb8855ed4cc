// The tiled attention kernel with bf16 products for AVX-512 CPUs without
// AVX512-BF16 (Ice Lake class): avx512/flash_bf16_512.h with VDPBF16PS and
// the bf16 conversions emulated on 16 lanes (the definition's operations,
// bf16_generic.h). CPUs with AVX512-BF16 replace it (avx512bf16::Fill).
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/flash_bf16_512.h"

namespace infera::avx512 {

void FillFlashBf16(KernelTable* t) {
  t->flash_chunk_bf16 = flash_bf16_512::FlashChunkBf16;
  t->flash_bf16_variant = "avx512-tiled (bf16 products emulated)";
}

}  // namespace infera::avx512
