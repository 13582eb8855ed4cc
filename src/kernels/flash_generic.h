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

// Dimension d of the K of tile lanes [j0, j1] (positions t0 + j) as
// float: in place when those slots are consecutive within one 16-slot group
// (KV blocks of a multiple of 16 slots), else gathered into buf
// [head_dim][16]. int8: the unscaled integers.
template <typename T>
const T* FlashKTile(const T* k, const int32_t* slots, int j0, int j1, int hd, T* buf) {
  const int32_t base = slots[j0] - j0;
  bool in_place = base % kFlashTile == 0;
  for (int j = j0; j <= j1 && in_place; ++j) in_place = slots[j] == base + j;
  if (in_place) return k + static_cast<int64_t>(base / kFlashTile) * hd * kFlashTile;
  std::fill(buf, buf + static_cast<int64_t>(hd) * kFlashTile, T{0});
  for (int j = j0; j <= j1; ++j) {
    for (int d = 0; d < hd; ++d) buf[d * kFlashTile + j] = k[FlashKIndex(slots[j], d, hd)];
  }
  return buf;
}

// dots[j] = dot(q, k_j) for the 16 lanes of a K tile kt [hd][16] (the
// tiled kernel's dot: four interleaved FMA chains, (a0 + a1) + (a2 + a3)),
// written lane-wise so that compilers vectorize it.
template <typename T>
void FlashTileDots(const float* q, const T* kt, int hd, float* dots) {
  float a0[kFlashTile] = {}, a1[kFlashTile] = {}, a2[kFlashTile] = {}, a3[kFlashTile] = {};
  int d = 0;
  for (; d + 4 <= hd; d += 4) {
    const float q0 = q[d], q1 = q[d + 1], q2 = q[d + 2], q3 = q[d + 3];
    const T* k0 = kt + d * kFlashTile;
    for (int j = 0; j < kFlashTile; ++j) {
      a0[j] = std::fma(q0, static_cast<float>(k0[j]), a0[j]);
      a1[j] = std::fma(q1, static_cast<float>(k0[kFlashTile + j]), a1[j]);
      a2[j] = std::fma(q2, static_cast<float>(k0[2 * kFlashTile + j]), a2[j]);
      a3[j] = std::fma(q3, static_cast<float>(k0[3 * kFlashTile + j]), a3[j]);
    }
  }
  float* tail[3] = {a0, a1, a2};
  for (int c = 0; d + c < hd; ++c) {
    const float qd = q[d + c];
    const T* kr = kt + (d + c) * kFlashTile;
    for (int j = 0; j < kFlashTile; ++j) tail[c][j] = std::fma(qd, static_cast<float>(kr[j]), tail[c][j]);
  }
  for (int j = 0; j < kFlashTile; ++j) dots[j] = (a0[j] + a1[j]) + (a2[j] + a3[j]);
}

// The defining chunk kernel (FlashChunkFn): tile by tile, and in each tile
// row by row (every row's operations are those of FlashChunkFn in order;
// the rows of a tile share its K and V from L1).
// Scratch: a gathered K tile (16 * head_dim floats).
inline void FlashChunkGeneric(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o,
                              float* scratch) {
  const int hd = b.head_dim, g = b.g;
  const bool q8 = b.k8 != nullptr;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  for (int r = ia * g; r < ib * g; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
    std::memset(o + static_cast<int64_t>(r) * hd, 0, sizeof(float) * hd);
  }
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  float s[kFlashTile], p[kFlashTile];
  for (int32_t t0 = ulo - ulo % kFlashTile; t0 <= uhi; t0 += kFlashTile) {
    const int j0 = std::max(0, ulo - t0), j1 = std::min(kFlashTile - 1, uhi - t0);
    const int32_t* slots = b.slots + t0;
    const float* kt = q8 ? nullptr : FlashKTile(b.k, slots, j0, j1, hd, scratch);
    const int8_t* kt8 = q8 ? FlashKTile(b.k8, slots, j0, j1, hd, reinterpret_cast<int8_t*>(scratch)) : nullptr;
    for (int i = ia; i < ib; ++i) {
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      if (z < t0 || a > t0 + kFlashTile - 1) continue;  // the row does not see this tile
      const int r0 = std::max(0, a - t0), r1 = std::min(kFlashTile - 1, z - t0);
      for (int h = 0; h < g; ++h) {
        const int r = i * g + h;
        const float* q = b.q + i * b.q_stride + h * hd;
        float* orow = o + static_cast<int64_t>(r) * hd;
        if (q8) FlashTileDots(q, kt8, hd, s);
        else FlashTileDots(q, kt, hd, s);
        float mx = m[r];
        for (int j = 0; j < kFlashTile; ++j) {
          if (j < r0 || j > r1) {
            s[j] = -INFINITY;
            continue;
          }
          s[j] = SoftCap(q8 ? s[j] * (b.ks[slots[j]] * b.scale) : s[j] * b.scale, b.softcap);
          mx = std::max(mx, s[j]);
        }
        const float corr = ExpNonPositive(m[r] - mx);  // 0 on the row's first tile
        for (int j = 0; j < kFlashTile; ++j) p[j] = ExpNonPositive(s[j] - mx);  // masked: 0
        l[r] = l[r] * corr + Reduce16(p);
        for (int d = 0; d < hd; ++d) orow[d] *= corr;
        for (int j = r0; j <= r1; ++j) {
          const int64_t row = static_cast<int64_t>(slots[j]) * hd;
          if (q8) {
            const float pv = p[j] * b.vs[slots[j]];
            for (int d = 0; d < hd; ++d) orow[d] = std::fma(pv, static_cast<float>(b.v8[row + d]), orow[d]);
          } else {
            for (int d = 0; d < hd; ++d) orow[d] = std::fma(p[j], b.v[row + d], orow[d]);
          }
        }
        m[r] = mx;
      }
    }
  }
}

}  // namespace
}  // namespace infera
