// Tiled attention with online softmax ("flash" attention), the defining
// scalar form every ISA reproduces bit for bit (see FlashChunkFn in
// kernels.h). A block of query tokens of one sequence whose g query heads
// share one KV head goes through the cached positions in tiles of kFlashTile
// positions aligned to multiples of kFlashTile, so every K/V row is loaded
// once per block rather than once per query. Memory is O(rows · head_dim),
// never a score row of the whole context.
//
// Each row's arithmetic depends only on its own query and range of
// positions, never on the other rows of its block: a token's output is the
// same whether it is decoded alone or prefilled in a block of 32 (batch
// invariance).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"

namespace infera {
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags (one shared inline copy could be an AVX-512 one run on any CPU).
namespace {

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

// Quantizes one head's row x [n] to int8 with one scale (amax / 127):
// store(i, q_i) for each element; returns the scale.
template <typename Store>
float QuantizeKvRowTo(const float* x, int n, Store&& store) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) store(i, static_cast<int8_t>(std::nearbyint(x[i] * id)));
  return d;
}
inline float QuantizeKvRow(const float* x, int n, int8_t* q) {
  return QuantizeKvRowTo(x, n, [q](int i, int8_t v) { q[i] = v; });
}

// softcap * tanh(s / softcap) for softcap > 0, else s (attention scores).
inline float SoftCap(float s, float softcap) { return softcap > 0 ? softcap * std::tanh(s / softcap) : s; }

// The tiled kernel's dot of q with the K of `slot` (FlashChunkFn): four
// interleaved fused multiply-add chains, (a0 + a1) + (a2 + a3). int8: of the
// unscaled integers.
inline float FlashDot(const FlashBlock& b, const float* q, int32_t slot) {
  float a[4] = {0, 0, 0, 0};
  for (int d = 0; d < b.head_dim; ++d) {
    const int64_t i = FlashKIndex(slot, d, b.head_dim);
    const float k = b.k8 != nullptr ? static_cast<float>(b.k8[i]) : b.k[i];
    a[d % 4] = std::fma(q[d], k, a[d % 4]);
  }
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// The defining chunk kernel (FlashChunkFn): row by row, tile by tile.
inline void FlashChunkGeneric(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float*) {
  const int hd = b.head_dim;
  const bool q8 = b.k8 != nullptr;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  float s[kFlashTile], p[kFlashTile];
  for (int i = ia; i < ib; ++i) {
    const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
    for (int h = 0; h < b.g; ++h) {
      const int r = i * b.g + h;
      const float* q = b.q + i * b.q_stride + h * hd;
      float mr = -INFINITY, lr = 0;
      float* orow = o + static_cast<int64_t>(r) * hd;
      std::memset(orow, 0, sizeof(float) * hd);
      for (int32_t t0 = a - a % kFlashTile; t0 <= z; t0 += kFlashTile) {
        float mx = mr;
        for (int j = 0; j < kFlashTile; ++j) {
          const int32_t pos = t0 + j;
          if (pos < a || pos > z) {
            s[j] = -INFINITY;
            continue;
          }
          const int32_t slot = b.slots[pos];
          const float dot = FlashDot(b, q, slot);
          s[j] = SoftCap(q8 ? dot * (b.ks[slot] * b.scale) : dot * b.scale, b.softcap);
          mx = std::max(mx, s[j]);
        }
        const float corr = ExpNonPositive(mr - mx);  // 0 on the first tile
        for (int j = 0; j < kFlashTile; ++j) p[j] = ExpNonPositive(s[j] - mx);  // masked: 0
        lr = lr * corr + Reduce16(p);
        for (int d = 0; d < hd; ++d) orow[d] *= corr;
        for (int j = std::max(0, a - t0); j < kFlashTile && t0 + j <= z; ++j) {
          const int64_t row = static_cast<int64_t>(b.slots[t0 + j]) * hd;
          if (q8) {
            const float pv = p[j] * b.vs[b.slots[t0 + j]];
            for (int d = 0; d < hd; ++d) orow[d] = std::fma(pv, static_cast<float>(b.v8[row + d]), orow[d]);
          } else {
            for (int d = 0; d < hd; ++d) orow[d] = std::fma(p[j], b.v[row + d], orow[d]);
          }
        }
        mr = mx;
      }
      m[r] = mr;
      l[r] = lr;
    }
  }
}

}  // namespace
}  // namespace infera
