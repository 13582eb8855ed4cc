// Attention of one query head over cached K/V rows, composed from a dot and
// an axpy kernel (the reference definition every fused variant reproduces).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"

namespace infera {
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags (one shared inline copy could be an AVX-512 one run on any CPU).
namespace {

// scores[i] = dot(q, K[first + i]) * scale; softmax; out = sum_i p_i V[first + i]
// accumulated in i order with fused multiply-adds.
template <float (*Dot)(const float*, const float*, int64_t), void (*Axpy)(float, const float*, float*, int64_t)>
void AttendHeadComposed(const float* q, const float* k_base, const float* v_base, int64_t row_stride, int head_dim,
                        float scale, float softcap, const int32_t* slots, int32_t first, int32_t last, float* scores,
                        float* out) {
  const int32_t n = last - first + 1;
  for (int32_t i = 0; i < n; ++i) {
    scores[i] = Dot(q, k_base + static_cast<int64_t>(slots[first + i]) * row_stride, head_dim) * scale;
    if (softcap > 0) scores[i] = softcap * std::tanh(scores[i] / softcap);
  }
  Softmax(scores, n);
  std::memset(out, 0, sizeof(float) * head_dim);
  for (int32_t i = 0; i < n; ++i) {
    Axpy(scores[i], v_base + static_cast<int64_t>(slots[first + i]) * row_stride, out, head_dim);
  }
}

}  // namespace
}  // namespace infera
