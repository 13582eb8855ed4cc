// Tiled attention with online softmax ("flash" attention), the defining
// scalar form every ISA reproduces bit for bit (see FlashChunkFn in
// kernels.h). A block of query tokens of one sequence whose g query heads
// share one KV head goes through the cached positions in steps of kFlashStep
// positions aligned to multiples of kFlashStep, so every K/V row is loaded
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

#include "kernels/exp_generic.h"
#include "kernels/kernels.h"

namespace infera {
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags (one shared inline copy could be an AVX-512 one run on any CPU).
namespace {

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

// Quantizes query row q [hd] for an int8 cache (FlashChunkFn): per block b
// of kFlashQBlock dimensions (the last one may be shorter) QuantizeKvRowTo,
// qs[b] = its scale; store(d, q8_d) for each dimension.
template <typename Store>
void QuantizeFlashQuery(const float* q, int hd, float* qs, Store&& store) {
  for (int b = 0, d0 = 0; d0 < hd; ++b, d0 += kFlashQBlock) {
    const int n = std::min(kFlashQBlock, hd - d0);
    qs[b] = QuantizeKvRowTo(q + d0, n, [&](int i, int8_t v) { store(d0 + i, v); });
  }
}

// Rows [r0, r1) of b quantized (int8 caches) into the chunk scratch at
// FlashChunkQueryOffset(b.rows(), hd): row r at the returned pointer + r *
// FlashQueryFloats(hd), its q8 as floats [hd] (exact), then its block scales.
inline float* FlashQueriesAsFloats(const FlashBlock& b, int r0, int r1, float* scratch) {
  const int hd = b.head_dim;
  float* base = scratch + FlashChunkQueryOffset(b.rows(), hd);
  for (int r = r0; r < r1; ++r) {
    float* row = base + int64_t(r) * FlashQueryFloats(hd);
    QuantizeFlashQuery(b.q + (r / b.g) * b.q_stride + (r % b.g) * hd, hd, row + hd,
                       [row](int d, int8_t v) { row[d] = v; });
  }
  return base;
}

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

// The next step's K tiles and V rows (bytes), which the ISA kernels
// prefetch a line at a time while a step computes.
struct FlashNextStep {
  const char* k[kFlashStepTiles];  // tile c: [head_dim][16]
  const char* v[kFlashStepTiles];  // rows of tile c's 16 slots: [16][head_dim]
};

// The K tiles and V rows of the 16-slot groups holding positions t0, t0 +
// 16, t0 + 32, t0 + 48 (those past `last` replaced by `last`, whose slot
// exists): what the next step reads when its KV blocks hold whole groups
// (elsewhere the prefetches miss, harmlessly). kQ8: the int8 cache.
template <bool kQ8>
void FindFlashNextStep(const FlashBlock& b, int32_t t0, int32_t last, FlashNextStep* n) {
  const int hd = b.head_dim;
  for (int c = 0; c < kFlashStepTiles; ++c) {
    const int32_t slot = b.slots[std::min(last, t0 + c * kFlashTile)];
    const int64_t group = slot - slot % kFlashTile, tile = FlashKIndex(static_cast<int32_t>(group), 0, hd);
    if constexpr (kQ8) {
      n->v[c] = reinterpret_cast<const char*>(b.v8 + group * hd);
      n->k[c] = reinterpret_cast<const char*>(b.k8 + tile);
    } else {
      n->v[c] = reinterpret_cast<const char*>(b.v + group * hd);
      n->k[c] = reinterpret_cast<const char*>(b.k + tile);
    }
  }
}

// The state of rows [r0, r1) before a chunk: m = -inf, l = 0, o = 0.
inline void FlashResetRows(int r0, int r1, int hd, float* m, float* l, float* o) {
  for (int r = r0; r < r1; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
    std::memset(o + static_cast<int64_t>(r) * hd, 0, sizeof(float) * hd);
  }
}

// dots[j] = dot(q, k_j) for the 16 lanes of a K tile kt [hd][16] (the
// tiled kernel's dot: one fused multiply-add chain per lane in increasing
// d), written lane-wise so that compilers vectorize it.
template <typename T>
void FlashTileDots(const float* q, const T* kt, int hd, float* dots) {
  float a[kFlashTile] = {};
  for (int d = 0; d < hd; ++d) {
    const float qd = q[d];
    const T* kd = kt + d * kFlashTile;
    for (int j = 0; j < kFlashTile; ++j) a[j] = std::fma(qd, static_cast<float>(kd[j]), a[j]);
  }
  std::memcpy(dots, a, sizeof(a));
}

// dots[j] = the int8 cache's dot(q, k_j) for the 16 lanes of tile kt
// [hd][16]: q's q8 as floats qf [hd] and block scales qs; each block's
// integer sum (exact in floats), folded into one fma chain over the blocks.
inline void FlashTileDotsQ8(const float* qf, const float* qs, const int8_t* kt, int hd, float* dots) {
  float a[kFlashTile] = {};
  for (int d0 = 0, blk = 0; d0 < hd; d0 += kFlashQBlock, ++blk) {
    float sum[kFlashTile] = {};
    for (int d = d0; d < std::min(hd, d0 + kFlashQBlock); ++d) {
      const float qd = qf[d];
      const int8_t* kd = kt + d * kFlashTile;
      for (int j = 0; j < kFlashTile; ++j) sum[j] = std::fma(qd, static_cast<float>(kd[j]), sum[j]);
    }
    for (int j = 0; j < kFlashTile; ++j) a[j] = std::fma(qs[blk], sum[j], a[j]);
  }
  std::memcpy(dots, a, sizeof(a));
}

// FlashTileDots for a step's 4 tiles at once (dots [64]): the same chain per
// lane, the tiles' chains interleaved so that the core overlaps them (one
// tile alone is two 8-lane chains on AVX2, each fma waiting for the last:
// 37 % of this kernel's time in a Q4_0 pp512 profile). Four named arrays:
// with one [4][16] array GCC kept the sums in memory. Used for prefill
// blocks: m360 Q4_0 pp512 +3-5 % on Zen 3, while decode at depth 2,048
// measured no gain (its K comes from memory).
template <typename T>
void FlashStepDots4(const float* q, const T* const* kt, int hd, float* dots) {
  float a0[kFlashTile] = {}, a1[kFlashTile] = {}, a2[kFlashTile] = {}, a3[kFlashTile] = {};
  const T *k0 = kt[0], *k1 = kt[1], *k2 = kt[2], *k3 = kt[3];
  for (int d = 0; d < hd; ++d) {
    const float qd = q[d];
    const int o = d * kFlashTile;
    for (int j = 0; j < kFlashTile; ++j) {
      a0[j] = std::fma(qd, static_cast<float>(k0[o + j]), a0[j]);
      a1[j] = std::fma(qd, static_cast<float>(k1[o + j]), a1[j]);
      a2[j] = std::fma(qd, static_cast<float>(k2[o + j]), a2[j]);
      a3[j] = std::fma(qd, static_cast<float>(k3[o + j]), a3[j]);
    }
  }
  std::memcpy(dots, a0, sizeof(a0));
  std::memcpy(dots + kFlashTile, a1, sizeof(a1));
  std::memcpy(dots + 2 * kFlashTile, a2, sizeof(a2));
  std::memcpy(dots + 3 * kFlashTile, a3, sizeof(a3));
}

// One row's value update of a step, head_dim kHd: o = o * corr, then over
// positions j in [r0, r1] o = fma(p_j, v_j, o) (int8: fma(p_j * vs_j,
// float(v8_j), o)): FlashChunkGeneric's operations, in a local copy of the
// row that the compiler keeps in registers across the positions (orow may
// alias V as far as it knows, which made it store and reload the row for
// every position).
template <int kHd>
inline void FlashValuesFixed(const FlashBlock& b, bool q8, const int32_t* slots, const float* p, float corr, int r0,
                             int r1, float* orow) {
  float acc[kHd];
  for (int d = 0; d < kHd; ++d) acc[d] = orow[d] * corr;
  for (int j = r0; j <= r1; ++j) {
    const int64_t row = static_cast<int64_t>(slots[j]) * kHd;
    if (q8) {
      const float pv = p[j] * b.vs[slots[j]];
      const int8_t* v = b.v8 + row;
      for (int d = 0; d < kHd; ++d) acc[d] = std::fma(pv, static_cast<float>(v[d]), acc[d]);
    } else {
      const float* v = b.v + row;
      for (int d = 0; d < kHd; ++d) acc[d] = std::fma(p[j], v[d], acc[d]);
    }
  }
  std::memcpy(orow, acc, sizeof(acc));
}

// The defining chunk kernel (FlashChunkFn): step by step, and in each step
// row by row (every row's operations are those of FlashChunkFn in order;
// the rows of a step share its K and V from L1).
// Scratch: the step's gathered K tiles (kFlashStep * head_dim floats);
// int8 caches: the quantized queries from FlashChunkQueryOffset.
inline void FlashChunkGeneric(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o,
                              float* scratch) {
  const int hd = b.head_dim, g = b.g;
  const bool q8 = b.k8 != nullptr;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  const int64_t tile_floats = static_cast<int64_t>(kFlashTile) * hd;
  float s[kFlashStep], p[kFlashStep];
  const float* qbase = q8 ? FlashQueriesAsFloats(b, ia * g, ib * g, scratch) : nullptr;
  const float* kt[kFlashStepTiles];
  const int8_t* kt8[kFlashStepTiles];
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    const int j0 = std::max(0, ulo - t0), j1 = std::min(kFlashStep - 1, uhi - t0);
    const int32_t* slots = b.slots + t0;
    for (int c = 0; c < kFlashStepTiles; ++c) {  // the K tiles holding lanes [j0, j1]
      const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
      kt[c] = nullptr;
      kt8[c] = nullptr;
      if (a > z) continue;
      float* buf = scratch + c * tile_floats;
      if (q8) kt8[c] = FlashKTile(b.k8, slots + c0, a, z, hd, reinterpret_cast<int8_t*>(buf));
      else kt[c] = FlashKTile(b.k, slots + c0, a, z, hd, buf);
    }
    for (int i = ia; i < ib; ++i) {
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      if (z < t0 || a > t0 + kFlashStep - 1) continue;  // the row does not see this step
      const int r0 = std::max(0, a - t0), r1 = std::min(kFlashStep - 1, z - t0);
      for (int h = 0; h < g; ++h) {
        const int r = i * g + h;
        const float* q = b.q + i * b.q_stride + h * hd;
        float* orow = o + static_cast<int64_t>(r) * hd;
        static_assert(kFlashStepTiles == 4);
        if (q8) {
          const float* qf = qbase + int64_t(r) * FlashQueryFloats(hd);
          for (int c = 0; c < kFlashStepTiles; ++c) {
            if (r1 < c * kFlashTile || r0 > c * kFlashTile + kFlashTile - 1) continue;
            FlashTileDotsQ8(qf, qf + hd, kt8[c], hd, s + c * kFlashTile);
          }
        } else if (b.nq > 1 && r0 < kFlashTile && r1 >= kFlashStep - kFlashTile) {  // prefill, every tile
          FlashStepDots4(q, kt, hd, s);
        } else {
          for (int c = 0; c < kFlashStepTiles; ++c) {  // dots of the tiles the row sees
            if (r1 < c * kFlashTile || r0 > c * kFlashTile + kFlashTile - 1) continue;
            FlashTileDots(q, kt[c], hd, s + c * kFlashTile);
          }
        }
        float mx = m[r];
        for (int j = 0; j < kFlashStep; ++j) {
          if (j < r0 || j > r1) {
            s[j] = -INFINITY;
            continue;
          }
          s[j] = SoftCap(q8 ? s[j] * (b.ks[slots[j]] * b.scale) : s[j] * b.scale, b.softcap);
          mx = std::max(mx, s[j]);
        }
        const float corr = ExpNonPositive(m[r] - mx);  // 0 on the row's first step
        for (int j = 0; j < kFlashStep; ++j) p[j] = ExpNonPositive(s[j] - mx);  // masked: 0
        l[r] = l[r] * corr + Reduce64(p);
        if (hd == 64) {
          FlashValuesFixed<64>(b, q8, slots, p, corr, r0, r1, orow);
        } else if (hd == 128) {
          FlashValuesFixed<128>(b, q8, slots, p, corr, r0, r1, orow);
        } else {
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
        }
        m[r] = mx;
      }
    }
  }
}

// The defining merge (FlashMergeFn).
inline void FlashMergeGeneric(const FlashBlock& b, int32_t lo, int32_t hi, const float* mc, const float* lc,
                              const float* oc, float* m, float* l, float* o) {
  const int hd = b.head_dim;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  for (int row = ia * b.g; row < ib * b.g; ++row) {
    float* orow = o + static_cast<int64_t>(row) * hd;
    const float* ocrow = oc + static_cast<int64_t>(row) * hd;
    if (l[row] == 0) {  // before the first chunk (a chunk's sum is >= 1)
      m[row] = mc[row];
      l[row] = lc[row];
      std::memcpy(orow, ocrow, sizeof(float) * hd);
      continue;
    }
    const float mx = std::max(m[row], mc[row]);
    const float a = ExpNonPositive(m[row] - mx), e = ExpNonPositive(mc[row] - mx);
    l[row] = l[row] * a + lc[row] * e;
    for (int d = 0; d < hd; ++d) orow[d] = orow[d] * a + ocrow[d] * e;
    m[row] = mx;
  }
}

}  // namespace
}  // namespace infera
