// Float matrices stored as bf16 at load, for bf16 products
// (`--matmul-dtype bf16`, KernelTable::matmul_bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/kernels.h"
#include "model/config.h"
#include "model/weights.h"

namespace infera {

// Stores every F32 / F16 matrix the matmuls read (per-layer matrices and the
// output; not the token embedding, which lookups read as stored: a tied
// output gets its own copy) as BF16 rows in w->owned, each weight the
// Bf16Round of its value (`to_bf16`: KernelTable::row_to_bf16). Products in
// bf16 take exactly these bits from the stored weights (kernels.h,
// Bf16TileFn and Bf16TileRowsFn round the same way), so every result is
// unchanged; decode reads 2 bytes per weight (F32: half), no rounding is
// left to do per token, and a tile unit loads the rows as they lie.
// `release` is called with each source's bytes once converted (a file
// mapping drops those pages; may be empty). Counts the copies in
// packed_bytes / packed_source_bytes. Returns the number converted.
int StoreFloatMatricesAsBf16(const ModelConfig& c, RowToBf16Fn to_bf16,
                             const std::function<void(const uint8_t*, size_t)>& release, ModelWeights* w);

}  // namespace infera
