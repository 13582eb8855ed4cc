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
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags (one shared inline copy could be an AVX-512 one run on any CPU).
namespace {

inline constexpr int kFlashTile = 32;      // cached positions per tile

// q [g, head_dim] -> out [g, head_dim]; positions [first, last]; the row of
// position p is at base + slots[p] * row_stride. Dot is the f32 dot kernel;
// scratch holds g * (kFlashTile + 2) floats.
// exp(x) for x <= 0 (softmax arguments), to about 2 ulp: x = n ln2 + r with
// |r| <= ln2/2, a degree-6 polynomial for e^r, then 2^n from the exponent
// bits. Plain element-wise arithmetic with explicit FMAs and no branch (the
// cut-off is a select), so a compiler vectorizes a loop of it and every ISA
// still computes the same bits.
inline float ExpNonPositive(float x_in) {
  const float x = std::max(x_in, -87.0f);  // (also -inf) below the normal range: 0 at the end
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693145751953125f, x);  // ln2 split in two for accuracy
  r = std::fma(n, -1.428606765330187045e-06f, r);
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<int32_t>(n) << 23;
  float out;
  std::memcpy(&out, &bits, 4);
  return x_in > -87.0f ? out : 0.0f;
}

// Row sources: the f32 row of a slot (f32 cache: in place; int8 cache:
// dequantized into `buf`).
struct F32Rows {
  const float* base;
  int64_t stride;
  const float* Row(int32_t slot, float*) const { return base + static_cast<int64_t>(slot) * stride; }
};
struct Q8Rows {
  const int8_t* base;     // this head's first element of slot 0
  const float* scales;    // this head's scale of slot 0
  int64_t stride;         // kv_dim
  int64_t scale_stride;   // n_kv_heads
  int head_dim;
  const float* Row(int32_t slot, float* buf) const {
    const int8_t* r = base + static_cast<int64_t>(slot) * stride;
    const float s = scales[static_cast<int64_t>(slot) * scale_stride];
    for (int d = 0; d < head_dim; ++d) buf[d] = s * static_cast<float>(r[d]);
    return buf;
  }
};

// Quantizes one head's row x [n] to int8 with one scale (amax / 127).
inline float QuantizeKvRow(const float* x, int n, int8_t* q) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return d;
}

// softcap * tanh(s / softcap) for softcap > 0, else s (attention scores).
inline float SoftCap(float s, float softcap) { return softcap > 0 ? softcap * std::tanh(s / softcap) : s; }

template <float (*Dot)(const float*, const float*, int64_t), typename Rows>
void FlashAttendGroupRows(const float* q, int g, const Rows& krows, const Rows& vrows, int head_dim, float scale,
                          float softcap, const int32_t* slots, int32_t first, int32_t last, float* out,
                          float* scratch) {
  float rowbuf[512];  // head_dim <= 512
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
      const float* kr = krows.Row(slots[t0 + j], rowbuf);
      for (int h = 0; h < g; ++h) s[h * kFlashTile + j] = SoftCap(Dot(q + h * head_dim, kr, head_dim) * scale, softcap);
    }
    for (int h = 0; h < g; ++h) {
      float mx = m[h];
      for (int j = 0; j < nt; ++j) mx = std::max(mx, s[h * kFlashTile + j]);
      const float corr = ExpNonPositive(m[h] - mx);  // 0 on the first tile
      m[h] = mx;
      float sum = 0;
      for (int j = 0; j < nt; ++j) {
        const float p = ExpNonPositive(s[h * kFlashTile + j] - mx);
        s[h * kFlashTile + j] = p;
        sum += p;
      }
      l[h] = l[h] * corr + sum;
      float* o = out + h * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] *= corr;
    }
    for (int j = 0; j < nt; ++j) {
      const float* vr = vrows.Row(slots[t0 + j], rowbuf);
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

template <float (*Dot)(const float*, const float*, int64_t)>
void FlashAttendGroupScalar(const float* q, int g, const float* k_base, const float* v_base, int64_t row_stride,
                            int head_dim, float scale, float softcap, const int32_t* slots, int32_t first,
                            int32_t last, float* out, float* scratch) {
  FlashAttendGroupRows<Dot>(q, g, F32Rows{k_base, row_stride}, F32Rows{v_base, row_stride}, head_dim, scale, softcap,
                            slots, first, last, out, scratch);
}

// The int8 cache: k8/v8 point at this head's first element of slot 0, ks/vs at
// its scale of slot 0; row_stride = kv_dim, scale_stride = n_kv_heads.
template <float (*Dot)(const float*, const float*, int64_t)>
void FlashAttendGroupQ8(const float* q, int g, const int8_t* k8, const float* ks, const int8_t* v8, const float* vs,
                        int64_t row_stride, int64_t scale_stride, int head_dim, float scale, float softcap,
                        const int32_t* slots, int32_t first, int32_t last, float* out, float* scratch) {
  FlashAttendGroupRows<Dot>(q, g, Q8Rows{k8, ks, row_stride, scale_stride, head_dim},
                            Q8Rows{v8, vs, row_stride, scale_stride, head_dim}, head_dim, scale, softcap, slots, first,
                            last, out, scratch);
}

}  // namespace
}  // namespace infera
