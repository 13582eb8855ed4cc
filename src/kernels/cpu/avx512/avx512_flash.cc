// The tiled attention chunk kernel of the AVX-512 level (flash_chunk512.h).
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/flash_chunk512.h"

namespace infera::avx512 {

void FillFlash(KernelTable* t) {
  t->flash_chunk = FlashChunkAny;
  t->flash_merge = FlashMergeGeneric;  // inline FMAs in ExpNonPositive (no libm call)
  t->silu_mul = SiluMulGeneric;        // vectorized with this file's flags
  t->gelu_tanh_mul = GeluTanhMulGeneric;
  t->soft_cap = SoftCapGeneric;
  t->flash_variant = "avx512-tiled";
  // The bf16 form: the AVX512-BF16 kernel's code with its bf16 instructions
  // emulated (Ice Lake class; avx512bf16::Fill replaces it elsewhere).
  FillFlashBf16(t);
}

}  // namespace infera::avx512
