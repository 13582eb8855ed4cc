// Scalar unpacking of quantized weight rows into the form the integer dot
// kernels take (see kernels.h): weight = s * (u - 2^shift) + m per 16-group.
// The portable definition; ISA-specific unpackers must write the same bytes.
#pragma once

#include "kernels/kernels.h"

namespace infera::reference {
// Null for types without an unpacker.
UnpackRowFn ScalarUnpacker(DType t);
// Q4_K/Q5_K super-block header (d, dmin, 12 scale bytes) -> s, m [16].
void KScalesMins(const uint8_t* block, float* s, float* m);
// The same header as stored: d and dmin (f16 bits) and the 6-bit sub-scale and
// sub-min of each of the 8 sub-blocks, so that s = d * sc, m = -(dmin * mn).
void KScaleMinInts(const uint8_t* block, uint16_t* d, uint16_t* dmin, uint8_t* sc, uint8_t* mn);
}  // namespace infera::reference
