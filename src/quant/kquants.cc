#include "quant/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "quant/quant_search.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"

namespace infera::kquants {
namespace {

constexpr int kQK = 256;

// Stores sub-block j's 6-bit scale ls and min lm in the 12-byte K4 layout
// (the inverse of ScaleMinK4). dst must start zeroed.
void PutScaleMinK4(int j, uint8_t ls, uint8_t lm, uint8_t* dst) {
  if (j < 4) {
    dst[j] = ls;
    dst[j + 4] = lm;
  } else {
    dst[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
    dst[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    dst[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
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

// Q4_K / Q5_K: the sub-block scales and mins of x [256] into block (d at 0,
// dmin at 2, scales at 4 .. 15), then the final quants L [256] in [0, nmax]
// against the rounded scales. qw [256] null: the reference search (llama.cpp's
// quantize_row_q4_K_ref); else its importance-weighted one.
void QuantizeKx(const float* x, const float* qw, int nmax, float rmin, int nstep, uint8_t* block, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  uint8_t* packed = block + 4;
  std::memset(packed, 0, 12);
  if (qw == nullptr) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
      const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
      PutScaleMinK4(j, ls, lm, packed);
    }
    PutHalf(block, max_scale / 63.0f);
    PutHalf(block + 2, max_min / 63.0f);
  } else {
    float sum_x2 = 0;
    for (int l = 0; l < kQK; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK;
    float sw[8];
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[j] = sumw;
      scales[j] = MakeQkx3Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
    }
    uint8_t Ls[8], Lm[8];
    const float d_block = MakeQpQuants(8, 63, scales, Ls, sw);
    const float m_block = MakeQpQuants(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) PutScaleMinK4(j, std::min<uint8_t>(63, Ls[j]), std::min<uint8_t>(63, Lm[j]), packed);
    PutHalf(block, d_block);
    PutHalf(block + 2, m_block);
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, packed, &sc, &m);
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

}  // namespace

// Code packers: L [256] codes into the block's quant bits (scales untouched).
void PackCodesQ2_K(const uint8_t* L, uint8_t* block) { Pack2Bits(L, block + 16); }

// Q3_K: bit 2 of each code into hmask (bit j / 32 of byte j % 32), bits 0-1
// into qs.
void PackCodesQ3_K(const uint8_t* L, uint8_t* block) {
  uint8_t* hmask = block;
  std::memset(hmask, 0, 32);
  uint8_t low[kQK];
  for (int j = 0; j < kQK; ++j) {
    if (L[j] > 3) hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32));
    low[j] = static_cast<uint8_t>(L[j] & 3);
  }
  Pack2Bits(low, block + 32);
}

void PackCodesQ4_K(const uint8_t* L, uint8_t* block) {
  uint8_t* q = block + 16;
  for (int j = 0; j < kQK; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q5_K: low nibbles as Q4_K's at 48; bit 4 of code n + j (n a multiple of
// 32) in qh[j] bit n / 32.
void PackCodesQ5_K(const uint8_t* L, uint8_t* block) {
  uint8_t* qh = block + 16;
  uint8_t* ql = block + 48;
  std::memset(qh, 0, 32);
  for (int n = 0; n < kQK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      ql[j] = static_cast<uint8_t>((L[n + j] & 0x0F) | ((L[n + j + 32] & 0x0F) << 4));
      qh[j] |= static_cast<uint8_t>(((L[n + j] >> 4) << (n / 32)) | ((L[n + j + 32] >> 4) << (n / 32 + 1)));
    }
  }
}

void PackCodesQ6_K(const uint8_t* L, uint8_t* block) {
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

namespace {

// Q3_K's signed 6-bit scale of sub-block j from the 12-byte layout.
int Q3Scale(const uint8_t* sc, int j) {
  const int low = j < 8 ? sc[j] & 0x0F : sc[j - 8] >> 4;
  return (low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

// Q2_K's sub-block scales and mins (4 bits each, scales in the low nibble)
// for the reference path: each relative to the largest.
void Q2KScalesReference(const float* x, uint8_t* L, uint8_t* block) {
  uint8_t Laux[16];
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
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
    PutHalf(block + 80, max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j) sc[j] = 0;
    PutHalf(block + 80, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) sc[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
    PutHalf(block + 82, max_min / q4scale);
  } else {
    PutHalf(block + 82, 0.0f);
  }
}

// The importance-weighted path (llama.cpp's quantize_row_q2_K_impl).
void Q2KScalesWeighted(const float* x, const float* qw, uint8_t* L, uint8_t* block) {
  uint8_t Laux[16], Ls[16], Lm[16];
  float weight[16], mins[16], scales[16], sw[16] = {};
  float sumx2 = 0;
  for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / kQK;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    for (int l = 0; l < 16; ++l) sw[j] += weight[l];
    scales[j] = MakeQkx3Quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
  }
  const float dm = MakeQpQuants(16, 15, scales, Ls, sw);
  const float mm = MakeQpQuants(16, 15, mins, Lm, sw);
  PutHalf(block + 80, dm);
  PutHalf(block + 82, mm);
  for (int j = 0; j < 16; ++j) block[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
}

// Q3_K's signed 6-bit scale l (stored + 32, in [0, 64)) of sub-block j into
// the 12-byte layout (low nibbles in 0..7, high 2 bits in 8..11). sc zeroed.
void PutQ3Scale(int j, int l, uint8_t* sc) {
  if (j < 8) sc[j] = static_cast<uint8_t>(l & 0x0F);
  else sc[j - 8] |= static_cast<uint8_t>((l & 0x0F) << 4);
  sc[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
}

}  // namespace

// Q2_K: {scales[16]; qs[64]; d; dmin}.
void QuantizeQ2_K(const float* x, const float* qw, uint8_t* block) {
  uint8_t L[kQK];
  if (qw == nullptr) Q2KScalesReference(x, L, block);
  else Q2KScalesWeighted(x, qw, L, block);
  const uint8_t* sc = block;
  for (int j = 0; j < 16; ++j) {
    const float dd = GetHalf(block + 80) * (sc[j] & 0x0F);
    if (!dd) continue;
    const float dm = GetHalf(block + 82) * (sc[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt((x[16 * j + ii] + dm) / dd);
      L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  PackCodesQ2_K(L, block);
}

// Q3_K: {hmask[32]; qs[64]; scales[12]; d}.
void QuantizeQ3_K(const float* x, const float* qw, uint8_t* block) {
  int8_t L[kQK];
  float scales[16];
  uint8_t* sc = block + 96;
  uint8_t* d = block + 108;
  std::memset(sc, 0, 12);
  if (qw == nullptr) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    if (max_scale) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = NearestInt(iscale * scales[j]);
        PutQ3Scale(j, std::max(-32, std::min(31, l)) + 32, sc);
      }
      PutHalf(d, 1 / iscale);
    } else {
      PutHalf(d, 0.0f);
    }
  } else {
    float sumx2 = 0;
    for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / kQK;
    float weight[16], sw[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = MakeQxQuants(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    int8_t Ls[16];
    const float d_block = MakeQxQuants(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; ++j) PutQ3Scale(j, Ls[j], sc);
    PutHalf(d, d_block);
  }
  for (int j = 0; j < 16; ++j) {
    const float dd = GetHalf(d) * Q3Scale(sc, j);
    if (!dd) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / dd);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  PackCodesQ3_K(reinterpret_cast<const uint8_t*>(L), block);
}

// Q4_K: {d; dmin; scales[12]; qs[128]}.
void QuantizeQ4_K(const float* x, const float* qw, uint8_t* block) {
  uint8_t L[kQK];
  QuantizeKx(x, qw, 15, -1.0f, 20, block, L);
  PackCodesQ4_K(L, block);
}

// Q5_K: {d; dmin; scales[12]; qh[32]; qs[128]}.
void QuantizeQ5_K(const float* x, const float* qw, uint8_t* block) {
  uint8_t L[kQK];
  QuantizeKx(x, qw, 31, -0.5f, 15, block, L);
  PackCodesQ5_K(L, block);
}

// Q6_K: {ql[128]; qh[64]; scales[16]; d}. With importances the per-16 search
// weighs by them directly (llama.cpp's quantize_row_q6_K_impl).
void QuantizeQ6_K(const float* x, const float* qw, uint8_t* block) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : nullptr);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  std::memset(block, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // all zero (d = +0 is all-zero bits)
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
  PackCodesQ6_K(reinterpret_cast<const uint8_t*>(L), block);
}

namespace {

// The scale of one 32-block for the IQ4_NL grid: the best over 15 trial
// scales by weighted least squares (weight [32]); L [32] the codes at the
// first guess. 0 for an all-zero block.
float Iq4BlockScale(const float* x, const float* weight, uint8_t* L) {
  const int8_t* values = kIq4nlValues;
  constexpr int ntry = 7;
  const float max = SignedAbsMax(x, 32), amax = std::fabs(max);
  if (amax < 1e-15f) return 0;
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
  return d;
}

// weight [n] for x [n]: x^2, or with importances qw * sqrt(sigma2 + x^2),
// sigma2 = 2 * mean x^2 over the super-block (llama.cpp's
// quantize_row_iq4_nl_impl).
void Iq4Weights(const float* x, const float* qw, int n, float* weight) {
  if (qw == nullptr) {
    for (int j = 0; j < n; ++j) weight[j] = x[j] * x[j];
    return;
  }
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / n;
  for (int j = 0; j < n; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

void PackIq4Codes(const uint8_t* L, int n, uint8_t* qs) {
  for (int i = 0; i < n / 32; ++i) {
    for (int j = 0; j < 16; ++j) qs[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

}  // namespace

// IQ4_NL: {d; qs[16]}.
void QuantizeIq4Nl(const float* x, const float* qw, uint8_t* block) {
  float weight[32];
  uint8_t L[32];
  Iq4Weights(x, qw, 32, weight);
  const float scale = Iq4BlockScale(x, weight, L);
  PutHalf(block, scale);
  const float id = scale ? 1 / scale : 0;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(BestIndexInt8(16, kIq4nlValues, id * x[j]));
  PackIq4Codes(L, 32, block + 2);
}

// IQ4_XS: {d; u16 scales_h; scales_l[4]; qs[128]}: per 32 the IQ4_NL search,
// then 6-bit sub-scales against the super-block's d and the codes again.
void QuantizeIq4Xs(const float* x, const float* qw, uint8_t* block) {
  float weight[kQK], scales[8];
  uint8_t L[kQK];
  Iq4Weights(x, qw, kQK, weight);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = Iq4BlockScale(x + 32 * ib, weight + 32 * ib, L + 32 * ib);
    if (std::fabs(scales[ib]) > amax_scale) {
      amax_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32;
  PutHalf(block, d);
  const float id = d ? 1 / d : 0.0f;
  uint16_t scales_h = 0;
  uint8_t* scales_l = block + 4;
  for (int ib = 0; ib < 8; ++ib) {
    int l = NearestInt(id * scales[ib]);
    l = std::max(-32, std::min(31, l));
    const float dl = d * l;
    const float idl = dl ? 1 / dl : 0.0f;
    for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(BestIndexInt8(16, kIq4nlValues, idl * x[32 * ib + j]));
    l += 32;
    if (ib % 2 == 0) scales_l[ib / 2] = static_cast<uint8_t>(l & 0x0F);
    else scales_l[ib / 2] |= static_cast<uint8_t>((l & 0x0F) << 4);
    scales_h |= static_cast<uint16_t>((l >> 4) << (2 * ib));
  }
  std::memcpy(block + 2, &scales_h, 2);
  PackIq4Codes(L, kQK, block + 8);
}

}  // namespace infera::kquants

namespace infera::kquants {

CodeGridShape CodeGridShapeOf(DType t) {
  switch (t) {
    case DType::kQ2_K: return {256, 16, 4, 0, nullptr};
    case DType::kQ3_K: return {256, 16, 8, 4, nullptr};
    case DType::kQ4_K: return {256, 32, 16, 0, nullptr};
    case DType::kQ5_K: return {256, 32, 32, 0, nullptr};
    case DType::kQ6_K: return {256, 16, 64, 32, nullptr};
    case DType::kIQ4_NL: return {32, 32, 16, 0, kIq4nlValues};
    case DType::kIQ4_XS: return {256, 32, 16, 0, kIq4nlValues};
    case DType::kQ4_0: return {32, 32, 16, 8, nullptr};
    case DType::kQ4_1: return {32, 32, 16, 0, nullptr};
    case DType::kQ5_0: return {32, 32, 32, 16, nullptr};
    case DType::kQ5_1: return {32, 32, 32, 0, nullptr};
    case DType::kQ8_0: return {32, 32, 256, 128, nullptr};
    default: return {};
  }
}

void FitBlock(DType t, const float* x, const float* qw, uint8_t* block) {
  switch (t) {
    case DType::kQ2_K: QuantizeQ2_K(x, qw, block); break;
    case DType::kQ3_K: QuantizeQ3_K(x, qw, block); break;
    case DType::kQ4_K: QuantizeQ4_K(x, qw, block); break;
    case DType::kQ5_K: QuantizeQ5_K(x, qw, block); break;
    case DType::kQ6_K: QuantizeQ6_K(x, qw, block); break;
    case DType::kIQ4_NL: QuantizeIq4Nl(x, qw, block); break;
    case DType::kIQ4_XS: QuantizeIq4Xs(x, qw, block); break;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0: QuantizeRow(t, x, block, 32, qw); break;
    default: CHECK(false && "no code grid for this type");
  }
}

void ReadSubGrids(DType t, const uint8_t* block, SubGrid* grids) {
  switch (t) {
    case DType::kQ2_K:
      for (int j = 0; j < 16; ++j) grids[j] = {GetHalf(block + 80) * (block[j] & 0x0F), -(GetHalf(block + 82) * (block[j] >> 4))};
      break;
    case DType::kQ3_K:
      for (int j = 0; j < 16; ++j) grids[j] = {GetHalf(block + 108) * Q3Scale(block + 96, j), 0.0f};
      break;
    case DType::kQ4_K:
    case DType::kQ5_K:
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        ScaleMinK4(j, block + 4, &sc, &m);
        grids[j] = {GetHalf(block) * sc, -(GetHalf(block + 2) * m)};
      }
      break;
    case DType::kQ6_K: {
      const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
      for (int j = 0; j < 16; ++j) grids[j] = {GetHalf(block + 208) * sc[j], 0.0f};
      break;
    }
    case DType::kIQ4_NL: grids[0] = {GetHalf(block), 0.0f}; break;
    case DType::kIQ4_XS:
      for (int j = 0; j < 8; ++j) grids[j] = {Iq4XsSubScale(block, j), 0.0f};
      break;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: grids[0] = {GetHalf(block), 0.0f}; break;
    case DType::kQ4_1:
    case DType::kQ5_1: grids[0] = {GetHalf(block), GetHalf(block + 2)}; break;
    default: CHECK(false && "no code grid for this type");
  }
}

int NearestCode(const CodeGridShape& s, const SubGrid& g, float v) {
  if (g.a == 0) return s.zero;
  if (s.table != nullptr) return BestIndexInt8(s.n_codes, s.table, (1 / g.a) * v);
  const int l = NearestInt((v - g.b) / g.a);
  return std::max(-s.zero, std::min(s.n_codes - 1 - s.zero, l)) + s.zero;
}

double CodeValue(const CodeGridShape& s, const SubGrid& g, int code) {
  const double level = s.table != nullptr ? s.table[code] : code - s.zero;
  return static_cast<double>(g.a) * level + g.b;
}

void WriteCodes(DType t, const uint8_t* codes, uint8_t* block) {
  switch (t) {
    case DType::kQ2_K: PackCodesQ2_K(codes, block); break;
    case DType::kQ3_K: PackCodesQ3_K(codes, block); break;
    case DType::kQ4_K: PackCodesQ4_K(codes, block); break;
    case DType::kQ5_K: PackCodesQ5_K(codes, block); break;
    case DType::kQ6_K: PackCodesQ6_K(codes, block); break;
    case DType::kIQ4_NL: PackIq4Codes(codes, 32, block + 2); break;
    case DType::kIQ4_XS: PackIq4Codes(codes, kQK, block + 8); break;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_1:
    case DType::kQ5_1: {
      const bool with_min = t == DType::kQ4_1 || t == DType::kQ5_1;
      PackLegacyBlock(t, reinterpret_cast<const int8_t*>(codes), GetHalf(block), with_min ? GetHalf(block + 2) : 0.0f,
                      block);
      break;
    }
    case DType::kQ8_0: {  // codes 0..255 stand for -128..127
      int8_t q[32];
      for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(codes[i] - 128);
      PackLegacyBlock(t, q, GetHalf(block), 0.0f, block);
      break;
    }
    default: CHECK(false && "no code grid for this type");
  }
}

}  // namespace infera::kquants
