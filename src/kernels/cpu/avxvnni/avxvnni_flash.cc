// The tiled attention chunk kernel of the AVX2 level compiled with AVX-VNNI
// (flash_chunk256.h): an int8 cache's scores take 256-bit vpdpbusd on the
// quantized queries; f32 caches run the same code as the AVX2 level.
#include "kernels/cpu/avx2/flash_chunk256.h"
#include "kernels/cpu/avxvnni/avxvnni_kernels.h"

namespace infera::avxvnni {

void FillFlash(KernelTable* t) {
  t->flash_chunk = avx2::FlashChunkAvx2;
  t->flash_variant = "avxvnni-tiled";
}

}  // namespace infera::avxvnni
