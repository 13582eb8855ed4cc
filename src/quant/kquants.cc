#include "quant/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera::kquants {
namespace {

constexpr int kQK = 256;

// Round to nearest, ties to even, for |v| < 2^22 (the magic-number trick).
inline int NearestInt(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
}
float GetHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// Symmetric quants in [-nmax, nmax-1] (stored +nmax) with a weighted
// least-squares scale refined over 18 nearby trial scales. rmse_type 1:
// weights x^2.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n), amax = std::fabs(max);
  if (amax < 1e-30f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = sumlx / suml2;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// 3-bit symmetric quants with coordinate-descent refinement (x^2 weights).
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n), amax = std::fabs(max);
  if (amax == 0.0f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = NearestInt(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Asymmetric quants in [0, nmax] with scale and min (x ≈ scale * L - the_min)
// chosen by weighted least squares over nstep + 1 trial scales.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                     uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_mad += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_mad) {
        std::memcpy(L, Laux, n);
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// The 6-bit scale/min packing of Q4_K and Q5_K (inverse of ScaleMinK4).
void PackScalesMins(const float* scales, const float* mins, uint8_t* dst /*12*/, float* d, float* dmin) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(dst, 0, 12);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      dst[j] = ls;
      dst[j + 4] = lm;
    } else {
      dst[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      dst[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      dst[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d = max_scale / 63.0f;
  *dmin = max_min / 63.0f;
}

void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K / Q5_K common part: per 32-sub-block scale and min search, packed
// scales, then the final quants in [0, nmax] against the rounded scales.
// block: d at 0, dmin at 2, scales at 4 .. 15.
void QuantizeKx(const float* x, int nmax, float rmin, int nstep, uint8_t* block, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
  }
  float d, dmin;
  PackScalesMins(scales, mins, block + 4, &d, &dmin);
  PutHalf(block, d);
  PutHalf(block + 2, dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, block + 4, &sc, &m);
    const float dd = GetHalf(block) * sc;
    if (!dd) continue;
    const float dm = GetHalf(block + 2) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / dd);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

// Packs 2-bit fields of 256 values: byte j/4 + l of each 128 holds values
// l, l+32, l+64, l+96 in bits 0-1, 2-3, 4-5, 6-7.
void Pack2Bits(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

int BestIndexInt8(int n, const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav;
    else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

}  // namespace

float SignedAbsMax(const float* x, int n) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// Q2_K: {scales[16]; qs[64]; d; dmin}.
void QuantizeQ2_K(const float* x, uint8_t* block) {
  uint8_t L[kQK], Laux[16];
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.0f;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = block;
  uint8_t* d = block + 80;
  uint8_t* dmin = block + 82;
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
    PutHalf(d, max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j) sc[j] = 0;
    PutHalf(d, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) sc[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
    PutHalf(dmin, max_min / q4scale);
  } else {
    PutHalf(dmin, 0.0f);
  }
  for (int j = 0; j < 16; ++j) {
    const float dd = GetHalf(d) * (sc[j] & 0x0F);
    if (!dd) continue;
    const float dm = GetHalf(dmin) * (sc[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt((x[16 * j + ii] + dm) / dd);
      L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  Pack2Bits(L, block + 16);
}

// Q3_K: {hmask[32]; qs[64]; scales[12]; d}.
void QuantizeQ3_K(const float* x, uint8_t* block) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  uint8_t* hmask = block;
  uint8_t* qs = block + 32;
  uint8_t* sc = block + 96;
  uint8_t* d = block + 108;
  std::memset(sc, 0, 12);
  if (max_scale) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
      l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
      if (j < 8) sc[j] = l & 0x0F;
      else sc[j - 8] |= static_cast<uint8_t>((l & 0x0F) << 4);
      l = static_cast<int8_t>(l >> 4);
      sc[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    PutHalf(d, 1 / iscale);
  } else {
    PutHalf(d, 0.0f);
  }
  for (int j = 0; j < 16; ++j) {
    int8_t s = static_cast<int8_t>(j < 8 ? sc[j] & 0x0F : sc[j - 8] >> 4);
    s = static_cast<int8_t>((s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    const float dd = GetHalf(d) * s;
    if (!dd) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / dd);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  std::memset(hmask, 0, 32);
  int m = 0;
  uint8_t hm = 1;
  uint8_t Lu[kQK];
  for (int j = 0; j < kQK; ++j) {
    int v = L[j];
    if (v > 3) {
      hmask[m] |= hm;
      v -= 4;
    }
    Lu[j] = static_cast<uint8_t>(v);
    if (++m == kQK / 8) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  Pack2Bits(Lu, qs);
}

// Q4_K: {d; dmin; scales[12]; qs[128]}.
void QuantizeQ4_K(const float* x, uint8_t* block) {
  uint8_t L[kQK];
  QuantizeKx(x, 15, -1.0f, 20, block, L);
  uint8_t* q = block + 16;
  for (int j = 0; j < kQK; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q5_K: {d; dmin; scales[12]; qh[32]; qs[128]}.
void QuantizeQ5_K(const float* x, uint8_t* block) {
  uint8_t L[kQK];
  QuantizeKx(x, 31, -0.5f, 15, block, L);
  uint8_t* qh = block + 16;
  uint8_t* ql = block + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

// Q6_K: {ql[128]; qh[64]; scales[16]; d}.
void QuantizeQ6_K(const float* x, uint8_t* block) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  std::memset(block, 0, 210);
  if (!max_abs_scale) return;  // all zero (d = +0 is all-zero bits)
  const float iscale = -128.0f / max_scale;
  PutHalf(block + 208, 1 / iscale);
  auto* sc = reinterpret_cast<int8_t*>(block + 192);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = GetHalf(block + 208) * sc[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = block;
  uint8_t* qh = block + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l] & 0x0F, q2 = L[j + l + 32] & 0x0F;
      const uint8_t q3 = L[j + l + 64] & 0x0F, q4 = L[j + l + 96] & 0x0F;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
  }
}

// IQ4_NL: {d; qs[16]}: the best scale for the non-linear grid over 15 trial
// scales, weighted by x^2.
void QuantizeIq4Nl(const float* x, uint8_t* block) {
  const int8_t* values = kIq4nlValues;
  constexpr int ntry = 7;
  float weight[32];
  uint8_t L[32];
  std::memset(block + 2, 0, 16);
  for (int j = 0; j < 32; ++j) weight[j] = x[j] * x[j];
  const float max = SignedAbsMax(x, 32), amax = std::fabs(max);
  float scale = 0;
  if (amax >= 1e-15f) {
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float al = id * x[j];
      const int l = BestIndexInt8(16, values, al);
      L[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float al = id * x[j];
        const int l = BestIndexInt8(16, values, al);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scale = d;
  }
  PutHalf(block, scale);
  const float id = scale ? 1 / scale : 0;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(BestIndexInt8(16, values, id * x[j]));
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace infera::kquants
