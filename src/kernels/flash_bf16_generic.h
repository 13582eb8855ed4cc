// The tiled attention kernel with bf16 products (`--attn-dtype bf16`), the
// defining scalar form every ISA reproduces bit for bit (FlashChunkFn's
// bf16 form in kernels.h): queries, keys, values and probabilities rounded
// to bf16, products summed in f32 by pairs as VDPBF16PS does
// (bf16_generic.h). Same steps, masking, softmax and merge as the f32 kernel
// (flash_generic.h); f32 caches (rounded here) and bf16 caches (the same
// values stored rounded: the same bits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/bf16_generic.h"
#include "kernels/flash_generic.h"

namespace infera {
namespace {

// Scratch floats of FlashChunkGenericBf16 (within FlashChunkScratchFloats):
// the step's gathered K tiles, then its K and V rounded to bf16 ([64][hd]
// each, position-major) and one query row rounded.
inline void FlashChunkGenericBf16(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o,
                                  float* scratch) {
  const int hd = b.head_dim, g = b.g;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  const int64_t step_floats = static_cast<int64_t>(kFlashStep) * hd;
  float* kbuf = scratch;                   // [4][hd][16] gathered f32 K tiles
  float* kr = kbuf + step_floats;          // [64][hd + 1] K in bf16 (element hd: 0)
  float* vr = kr + kFlashStep * (hd + 1);  // [64][hd] V in bf16
  float* qr = vr + step_floats;            // [hd + 1] one query row in bf16 (element hd: 0)
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  float s[kFlashStep], p[kFlashStep];
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    const int j0 = std::max(0, ulo - t0), j1 = std::min(kFlashStep - 1, uhi - t0);
    const int32_t* slots = b.slots + t0;
    std::fill(kr, kr + kFlashStep * (hd + 1), 0.0f);
    std::fill(vr, vr + step_floats, 0.0f);
    for (int c = 0; c < kFlashStepTiles && b.k16 == nullptr; ++c) {  // the step's read lanes [j0, j1], rounded
      const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
      if (a > z) continue;
      const float* kt = FlashKTile(b.k, slots + c0, a, z, hd, kbuf + c * kFlashTile * hd);
      for (int j = a; j <= z; ++j) {
        for (int d = 0; d < hd; ++d) kr[(c0 + j) * (hd + 1) + d] = RoundToBf16(kt[d * kFlashTile + j]);
      }
    }
    for (int j = j0; j <= j1; ++j) {
      if (b.k16 != nullptr) {  // a bf16 cache: the same values, already rounded
        for (int d = 0; d < hd; ++d) {
          kr[j * (hd + 1) + d] = Bf16ToF32(b.k16[FlashK16Index(slots[j], d, hd)]);
          vr[j * hd + d] = Bf16ToF32(b.v16[FlashV16Index(slots[j], d, hd)]);
        }
        continue;
      }
      const float* v = b.v + static_cast<int64_t>(slots[j]) * hd;
      for (int d = 0; d < hd; ++d) vr[j * hd + d] = RoundToBf16(v[d]);
    }
    for (int i = ia; i < ib; ++i) {
      const int32_t a = std::max(lo, b.first[i]), z = std::min(hi, b.last[i]);
      if (z < t0 || a > t0 + kFlashStep - 1) continue;  // the row does not see this step
      const int r0 = std::max(0, a - t0), r1 = std::min(kFlashStep - 1, z - t0);
      for (int h = 0; h < g; ++h) {
        const int r = i * g + h;
        const float* q = b.q + i * b.q_stride + h * hd;
        for (int d = 0; d < hd; ++d) qr[d] = RoundToBf16(q[d]);
        qr[hd] = 0;
        float* orow = o + static_cast<int64_t>(r) * hd;
        float mx = m[r];
        for (int j = 0; j < kFlashStep; ++j) {
          if (j < r0 || j > r1) {
            s[j] = -INFINITY;
            continue;
          }
          const float* kj = kr + j * (hd + 1);
          float dot = 0;
          for (int d = 0; d < hd; d += 2) dot = DotBf16Pair(dot, qr[d], kj[d], qr[d + 1], kj[d + 1]);
          s[j] = SoftCap(dot * b.scale, b.softcap);
          mx = std::max(mx, s[j]);
        }
        const float corr = ExpNonPositive(m[r] - mx);  // 0 on the row's first step
        for (int j = 0; j < kFlashStep; ++j) p[j] = RoundToBf16(ExpNonPositive(s[j] - mx));  // masked: 0
        l[r] = l[r] * corr + Reduce64(p);
        for (int d = 0; d < hd; ++d) orow[d] *= corr;
        for (int j = r0 & ~1; j <= r1; j += 2) {  // pairs of positions covering the row's
          const float* v0 = vr + j * hd;
          const float* v1 = v0 + hd;
          const float p0 = p[j], p1 = p[j + 1];
          const bool seen0 = j >= r0,
                     seen1 = j + 1 <= r1;  // a lane the row does not see: V read as 0
          for (int d = 0; d < hd; ++d) {
            orow[d] = DotBf16Pair(orow[d], p0, seen0 ? v0[d] : 0.0f, p1, seen1 ? v1[d] : 0.0f);
          }
        }
        m[r] = mx;
      }
    }
  }
}

}  // namespace
}  // namespace infera
