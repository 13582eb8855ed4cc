#include "attention/naive_attention.h"

namespace infera {

void AttendHead(const KernelTable& k, const float* q, const float* k_base, const float* v_base,
                int64_t row_stride, int head_dim, float scale, float softcap, const int32_t* slots, int32_t first,
                int32_t last, float* scores, float* out) {
  k.attend_head(q, k_base, v_base, row_stride, head_dim, scale, softcap, slots, first, last, scores, out);
}

}  // namespace infera
