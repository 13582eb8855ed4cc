#include "kernels/flash.h"

#include <algorithm>
#include <cmath>
#include <cstring>


namespace infera {

namespace {

struct StateView {
  float* m;
  float* l;
  float* o;
};
StateView View(const FlashBlock& b, float* state) {
  const int64_t rows = b.rows();
  return {state, state + rows, state + 2 * rows};
}

}  // namespace

void FlashChunkRange(const FlashBlock& b, int32_t* c0, int32_t* c1) {
  *c0 = b.first[0] / kFlashChunk;
  *c1 = b.last[b.nq - 1] / kFlashChunk + 1;
}

void FlashRunChunk(const KernelTable& k, const FlashBlock& b, int32_t c, float* state, float* scratch) {
  const StateView s = View(b, state);
  const bool bf16 = b.k16 != nullptr || (k.attn_bf16 && b.k8 == nullptr);
  const FlashChunkFn chunk = bf16 ? k.flash_chunk_bf16 : k.flash_chunk;
  chunk(b, c * kFlashChunk, (c + 1) * kFlashChunk - 1, s.m, s.l, s.o, scratch);
}

void FlashStateInit(const FlashBlock& b, float* running) {
  const StateView s = View(b, running);
  std::fill(s.m, s.m + b.rows(), -INFINITY);
  std::fill(s.l, s.l + b.rows(), 0.0f);
}

void FlashMerge(const KernelTable& k, const FlashBlock& b, int32_t c, const float* chunk_state, float* running) {
  const StateView r = View(b, running);
  const StateView cs = View(b, const_cast<float*>(chunk_state));
  k.flash_merge(b, c * kFlashChunk, (c + 1) * kFlashChunk - 1, cs.m, cs.l, cs.o, r.m, r.l, r.o);
}

void FlashFinalize(const FlashBlock& b, const float* running, float* out, int64_t out_stride) {
  const int hd = b.head_dim;
  const StateView r = View(b, const_cast<float*>(running));
  for (int i = 0; i < b.nq; ++i) {
    for (int h = 0; h < b.g; ++h) {
      const int row = i * b.g + h;
      const float inv = 1.0f / r.l[row];
      const float* o = r.o + int64_t(row) * hd;
      float* y = out + i * out_stride + h * hd;
      for (int d = 0; d < hd; ++d) y[d] = o[d] * inv + 0.0f;
    }
  }
}

void FlashAttendBlock(const KernelTable& k, const FlashBlock& b, float* out, int64_t out_stride, float* scratch) {
  const size_t state = FlashStateFloats(b.rows(), b.head_dim);
  float* running = scratch;
  float* chunk = scratch + state;
  float* kernel_scratch = chunk + state;
  int32_t c0 = 0, c1 = 0;
  FlashChunkRange(b, &c0, &c1);
  FlashStateInit(b, running);
  for (int32_t c = c0; c < c1; ++c) {
    FlashRunChunk(k, b, c, chunk, kernel_scratch);
    FlashMerge(k, b, c, chunk, running);
  }
  FlashFinalize(b, running, out, out_stride);
}

}  // namespace infera
