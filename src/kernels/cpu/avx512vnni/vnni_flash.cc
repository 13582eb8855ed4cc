// The tiled attention chunk kernel of the AVX-512 level compiled with
// AVX512-VNNI (flash_chunk512.h): an int8 cache's scores take vpdpbusd on
// the quantized queries; f32 caches run the same code as the AVX-512 level.
#include "kernels/cpu/avx512/flash_chunk512.h"
#include "kernels/cpu/avx512vnni/vnni_kernels.h"

namespace infera::avx512vnni {

void FillFlash(KernelTable* t) {
  t->flash_chunk = avx512::FlashChunkAny;
  t->flash_variant = "avx512vnni-tiled";
}

}  // namespace infera::avx512vnni
