// Tiled attention with online softmax ("flash" attention) for one query
// token and one KV head group: the group's g query heads share every K and V
// row, which is loaded once per tile for all of them. Memory is O(g · tile),
// never a score row of the whole context.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace infera {

inline constexpr int kFlashTile = 32;      // cached positions per tile
inline constexpr int kFlashMaxGroup = 16;  // query heads per KV head

// q [g, head_dim] -> out [g, head_dim]; positions [first, last]; the row of
// position p is at base + slots[p] * row_stride. Dot is the f32 dot kernel;
// scratch holds g * (kFlashTile + 2) floats.
template <float (*Dot)(const float*, const float*, int64_t)>
void FlashAttendGroupScalar(const float* q, int g, const float* k_base, const float* v_base, int64_t row_stride,
                            int head_dim, float scale, const int32_t* slots, int32_t first, int32_t last, float* out,
                            float* scratch) {
  float* s = scratch;                   // [g][kFlashTile]
  float* m = scratch + g * kFlashTile;  // running max [g]
  float* l = m + g;                     // running sum [g]
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0;
  }
  std::memset(out, 0, sizeof(float) * g * head_dim);
  for (int32_t t0 = first; t0 <= last; t0 += kFlashTile) {
    const int nt = static_cast<int>(std::min<int32_t>(kFlashTile, last - t0 + 1));
    for (int j = 0; j < nt; ++j) {
      const float* kr = k_base + static_cast<int64_t>(slots[t0 + j]) * row_stride;
      for (int h = 0; h < g; ++h) s[h * kFlashTile + j] = Dot(q + h * head_dim, kr, head_dim) * scale;
    }
    for (int h = 0; h < g; ++h) {
      float mx = m[h];
      for (int j = 0; j < nt; ++j) mx = std::max(mx, s[h * kFlashTile + j]);
      const float corr = std::exp(m[h] - mx);  // 0 on the first tile
      m[h] = mx;
      float sum = 0;
      for (int j = 0; j < nt; ++j) {
        const float p = std::exp(s[h * kFlashTile + j] - mx);
        s[h * kFlashTile + j] = p;
        sum += p;
      }
      l[h] = l[h] * corr + sum;
      float* o = out + h * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] *= corr;
    }
    for (int j = 0; j < nt; ++j) {
      const float* vr = v_base + static_cast<int64_t>(slots[t0 + j]) * row_stride;
      for (int h = 0; h < g; ++h) {
        const float p = s[h * kFlashTile + j];
        float* o = out + h * head_dim;
        for (int d = 0; d < head_dim; ++d) o[d] = std::fma(p, vr[d], o[d]);
      }
    }
  }
  for (int h = 0; h < g; ++h) {
    const float inv = 1.0f / l[h];
    float* o = out + h * head_dim;
    for (int d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace infera
