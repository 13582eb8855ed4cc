// Driving the tiled attention kernel (KernelTable::flash_chunk) over a whole
// block: positions are cut into chunks of kFlashChunk aligned to multiples of
// it; each chunk's state (max, sum, unnormalized output per row) is computed
// afresh and left-folded into the running state in chunk order, then
// normalized. The chunks of one block may run on different threads (split
// decode over long contexts, "flash decoding") and be merged afterwards: the
// result is the same bits as running them one after another, whatever the
// split.
//
// Thread-safety: functions write only their outputs and scratch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace infera {

inline constexpr int32_t kFlashChunk = 256;
static_assert(kFlashChunk % kFlashStep == 0, "chunks hold whole softmax steps");

// The chunks [*c0, *c1) (chunk c covers [c * kFlashChunk, (c + 1) *
// kFlashChunk)) that some token of b sees.
void FlashChunkRange(const FlashBlock& b, int32_t* c0, int32_t* c1);

// Floats of one state of b: m [R], l [R], o [R, head_dim].
inline size_t FlashStateFloats(int rows, int head_dim) { return size_t(rows) * (head_dim + 2); }

// Runs chunk c of b into `state` (FlashStateFloats; rows of tokens not
// overlapping the chunk untouched).
void FlashRunChunk(const KernelTable& k, const FlashBlock& b, int32_t c, float* state, float* scratch);

// Running state (FlashStateFloats) of b before the first chunk.
void FlashStateInit(const FlashBlock& b, float* running);
// Left-folds chunk c's state into `running` for the rows of tokens that see
// chunk c: a first chunk is copied, later ones combined as
// m' = max(m, mc), l' = l * e^(m - m') + lc * e^(mc - m'), o the same way.
void FlashMerge(const KernelTable& k, const FlashBlock& b, int32_t c, const float* chunk_state, float* running);
// out row r = o_r / l_r at out + i * out_stride + h * head_dim (token i,
// head h); zeros of either sign come out as +0.
void FlashFinalize(const FlashBlock& b, const float* running, float* out, int64_t out_stride);

// Every chunk of b in one thread: out as FlashFinalize.
// Scratch: FlashBlockScratchFloats(b.rows(), b.head_dim).
void FlashAttendBlock(const KernelTable& k, const FlashBlock& b, float* out, int64_t out_stride, float* scratch);
inline size_t FlashBlockScratchFloats(int rows, int head_dim) {
  return 2 * FlashStateFloats(rows, head_dim) + FlashChunkScratchFloats(rows, head_dim);
}

}  // namespace infera
