// Reference attention of one query head over its sequence's cached K/V.
// Materializes the full score row; the forward pass uses the tiled kernel
// (kernels/flash_generic.h) and keeps this one as the reference for tests.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace infera {

// q [head_dim] -> out [head_dim]. Attends to positions [first, last]; the K
// row of position p starts at k_base + slots[p] * row_stride (k_base already
// offset to this head's KV group), likewise V. `scores` has last+1 floats.
void AttendHead(const KernelTable& k, const float* q, const float* k_base, const float* v_base,
                int64_t row_stride, int head_dim, float scale, float softcap, const int32_t* slots, int32_t first,
                int32_t last, float* scores, float* out);

}  // namespace infera
