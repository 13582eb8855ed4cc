// Portable scalar kernels: the oracle every ISA-specific kernel is tested
// against, and the path used on CPUs without AVX2.
#pragma once

#include "kernels/kernels.h"

namespace infera::reference {
void Fill(KernelTable* t);
// The tile form of the bf16 dot (kernels.h, Bf16TileRowsFn), scalar: the
// oracle of the tile-unit kernels (amx_bf16.cc). Not in the table: only a
// tile unit runs this form.
void Bf16TileRows(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2, int64_t m,
                  int64_t n, float* y, int64_t ldy);
void Bf16Pairs(const uint16_t* xb, int64_t ldx, int64_t m, int64_t n, uint32_t* x2, int64_t ld2);
}  // namespace infera::reference
