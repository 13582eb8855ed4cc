#include "attention/naive_attention.h"

#include <cstring>

namespace infera {

void AttendHead(const KernelTable& k, const float* q, const float* k_base, const float* v_base,
                int64_t row_stride, int head_dim, float scale, const int32_t* slots, int32_t first,
                int32_t last, float* scores, float* out) {
  const int32_t n = last - first + 1;
  for (int32_t i = 0; i < n; ++i) {
    scores[i] = k.dot_f32(q, k_base + static_cast<int64_t>(slots[first + i]) * row_stride, head_dim) * scale;
  }
  Softmax(scores, n);
  std::memset(out, 0, sizeof(float) * head_dim);
  for (int32_t i = 0; i < n; ++i) {
    k.axpy_f32(scores[i], v_base + static_cast<int64_t>(slots[first + i]) * row_stride, out, head_dim);
  }
}

}  // namespace infera
