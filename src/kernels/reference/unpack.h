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
}  // namespace infera::reference
