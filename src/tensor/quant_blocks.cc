#include "tensor/quant_blocks.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "tensor/fp16.h"

namespace infera {

const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

namespace {

// Whether a Q8_0 block has at most n nonzero quants in each group of m.
bool Q8_0BlockIsNM(const uint8_t* b, int n, int m) {
  for (int g = 0; g < 32 / m; ++g) {
    int nz = 0;
    for (int j = 0; j < m; ++j) nz += b[2 + m * g + j] != 0;
    if (nz > n) return false;
  }
  return true;
}

}  // namespace

bool Q8_0BlockIs24(const uint8_t* b) { return Q8_0BlockIsNM(b, 2, 4); }
bool Q8_0BlockIs48(const uint8_t* b) { return Q8_0BlockIsNM(b, 4, 8); }

namespace {

// The two positions of a 4-group with the largest magnitudes mag[4] (ties:
// the lower position), p0 < p1: the pair whose smaller member is largest,
// then the larger sum.
void BestPair24(const int* mag, int* p0, int* p1) {
  *p0 = 0;
  *p1 = 1;
  for (int j = 0; j < 4; ++j) {
    for (int k = j + 1; k < 4; ++k) {
      const int best = mag[*p0] + mag[*p1], cand = mag[j] + mag[k];
      const int bmin = std::min(mag[*p0], mag[*p1]), cmin = std::min(mag[j], mag[k]);
      if (cmin > bmin || (cmin == bmin && cand > best)) {
        *p0 = j;
        *p1 = k;
      }
    }
  }
}

// Q4_0's 4-bit value u of element j (0..31) of a block.
int Q4_0U(const uint8_t* b, int j) { return j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4); }

}  // namespace

void CompressQ8_0Block24(const uint8_t* b, uint8_t* s) {
  s[0] = b[0];
  s[1] = b[1];
  for (int i = 0; i < 4; ++i) s[2 + i] = 0;
  for (int g = 0; g < 8; ++g) {
    const int8_t* q = reinterpret_cast<const int8_t*>(b + 2 + 4 * g);
    int mag[4], p0, p1;
    for (int j = 0; j < 4; ++j) mag[j] = q[j] < 0 ? -q[j] : q[j];
    BestPair24(mag, &p0, &p1);
    s[2 + g / 2] |= static_cast<uint8_t>((p0 | p1 << 2) << (4 * (g % 2)));
    s[6 + 2 * g] = static_cast<uint8_t>(q[p0]);
    s[6 + 2 * g + 1] = static_cast<uint8_t>(q[p1]);
  }
}

bool Q4_0BlockIs24(const uint8_t* b) {
  for (int g = 0; g < 8; ++g) {
    int nz = 0;
    for (int j = 0; j < 4; ++j) nz += Q4_0U(b, 4 * g + j) != 8;
    if (nz > 2) return false;
  }
  return true;
}

void CompressQ4_0Block24(const uint8_t* b, uint8_t* s) {
  s[0] = b[0];
  s[1] = b[1];
  for (int i = 2; i < kQ4_0S24Bytes; ++i) s[i] = 0;
  for (int g = 0; g < 8; ++g) {
    int u[4], mag[4], p0, p1;
    for (int j = 0; j < 4; ++j) {
      u[j] = Q4_0U(b, 4 * g + j);
      mag[j] = u[j] < 8 ? 8 - u[j] : u[j] - 8;
    }
    BestPair24(mag, &p0, &p1);
    s[2 + g / 2] |= static_cast<uint8_t>((p0 | p1 << 2) << (4 * (g % 2)));
    s[6 + g] = static_cast<uint8_t>(u[p0] | u[p1] << 4);
  }
}

void ExpandQ4_0S24Block(const uint8_t* s, uint8_t* b) {
  b[0] = s[0];
  b[1] = s[1];
  uint8_t u[32];
  for (int j = 0; j < 32; ++j) u[j] = 8;
  for (int g = 0; g < 8; ++g) {
    const int code = (s[2 + g / 2] >> (4 * (g % 2))) & 0x0F;
    // (A damaged code with p0 == p1 keeps the second value.)
    u[4 * g + (code & 3)] = s[6 + g] & 0x0F;
    u[4 * g + (code >> 2)] = s[6 + g] >> 4;
  }
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(u[j] | u[j + 16] << 4);
}

void CompressQ8_0Block48(const uint8_t* b, uint8_t* s) {
  s[0] = b[0];
  s[1] = b[1];
  for (int g = 0; g < 4; ++g) {
    const int8_t* q = reinterpret_cast<const int8_t*>(b + 2 + 8 * g);
    auto mag = [&](int j) { return q[j] < 0 ? -static_cast<int>(q[j]) : static_cast<int>(q[j]); };
    // Position j is kept when fewer than four others outrank it (a larger
    // |q|, or an equal one at a lower position).
    uint8_t mask = 0;
    for (int j = 0; j < 8; ++j) {
      int above = 0;
      for (int k = 0; k < 8; ++k) above += mag(k) > mag(j) || (mag(k) == mag(j) && k < j);
      if (above < 4) mask |= static_cast<uint8_t>(1u << j);
    }
    s[2 + g] = mask;
    for (int j = 0, i = 0; j < 8; ++j) {
      if (mask >> j & 1) s[6 + 4 * g + i++] = static_cast<uint8_t>(q[j]);
    }
  }
}

void ExpandQ8_0S48Block(const uint8_t* s, uint8_t* b) {
  b[0] = s[0];
  b[1] = s[1];
  for (int j = 0; j < 32; ++j) b[2 + j] = 0;
  for (int g = 0; g < 4; ++g) {
    for (int j = 0, i = 0; j < 8 && i < 4; ++j) {
      if (s[2 + g] >> j & 1) b[2 + 8 * g + j] = s[6 + 4 * g + i++];
    }
  }
}

void ExpandQ8_0S24Block(const uint8_t* s, uint8_t* b) {
  b[0] = s[0];
  b[1] = s[1];
  for (int j = 0; j < 32; ++j) b[2 + j] = 0;
  for (int g = 0; g < 8; ++g) {
    const int code = (s[2 + g / 2] >> (4 * (g % 2))) & 0x0F;
    b[2 + 4 * g + (code & 3)] = s[6 + 2 * g];
    b[2 + 4 * g + (code >> 2)] = s[6 + 2 * g + 1];
  }
}

namespace {

constexpr int kQK = 32;    // elements per block of the 32-element types
constexpr int kQKK = 256;  // elements per K-quant super-block

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// Q4_0: {f16 d; u8 qs[16]}: x[j] = (lo nibble - 8) d, x[j+16] = (hi - 8) d.
void DeqQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}: x = q d + m.
void DeqQ4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}: 5th bit of element j in bit j of qh.
void DeqQ5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - 16) * d;
  }
}

// Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: x = q d + m.
void DeqQ5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>((qs[j] & 0x0F) | hi0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | hi1) * d + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}.
void DeqQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void DeqQ4_0S24(const uint8_t* b, float* y) {
  uint8_t dense[18];
  ExpandQ4_0S24Block(b, dense);
  DeqQ4_0(dense, y);
}

void DeqQ8_0S24(const uint8_t* b, float* y) {
  uint8_t dense[34];
  ExpandQ8_0S24Block(b, dense);
  DeqQ8_0(dense, y);
}

void DeqQ8_0S48(const uint8_t* b, float* y) {
  uint8_t dense[34];
  ExpandQ8_0S48Block(b, dense);
  DeqQ8_0(dense, y);
}

// IQ4_NL: {f16 d; u8 qs[16]}: nibbles index kIq4nlValues.
void DeqIq4Nl(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4nlValues[qs[j] & 0x0F];
    y[j + 16] = d * kIq4nlValues[qs[j] >> 4];
  }
}

// IQ4_XS: {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8 sub-blocks of
// 32 IQ4_NL values, each scaled by d * (ls - 32) with a 6-bit ls (low
// nibble in scales_l, high 2 bits in scales_h).
void DeqIq4Xs(const uint8_t* b, float* y) {
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = Iq4XsSubScale(b, ib);
    const uint8_t* qs = b + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * kIq4nlValues[qs[j] & 0x0F];
      y[32 * ib + j + 16] = dl * kIq4nlValues[qs[j] >> 4];
    }
  }
}

void DeqIq3s(const uint8_t* b, float* y) {
  int8_t v[32];
  for (int ib = 0; ib < 8; ++ib) {
    const float db = Iq3sSubScale(b, ib);
    Iq3sGroupValues(b, ib, v);
    for (int j = 0; j < 32; ++j) y[32 * ib + j] = db * static_cast<float>(v[j]);
  }
}

void DeqIq2Xs(const uint8_t* b, float* y) {
  int8_t v[16];
  for (int g = 0; g < 16; ++g) {
    const float db = Iq2xsSubScale(b, g);
    Iq2xsGroupValues(b, g, v);
    for (int j = 0; j < 16; ++j) y[16 * g + j] = db * static_cast<float>(v[j]);
  }
}

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}. 16 sub-blocks of 16,
// each with a 4-bit scale and 4-bit min; 2-bit quants.
void DeqQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  int is = 0;
  for (int n = 0; n < kQKK; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * (sc & 0x0F), ml = dmin * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. 16 sub-blocks of 16
// with 6-bit signed scales (bias 32) packed in 12 bytes; 3-bit quants whose
// high bit is in hmask (bit clear means subtract 4).
void DeqQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d_all = Half(b + 108);
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    const int high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQKK; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l) {
          const int idx = l + 16 * half;
          *y++ = dl * (((q[idx] >> shift) & 3) - ((hm[idx] & m) ? 0 : 4));
        }
      }
      m <<= 1;
    }
    q += 32;
  }
}

// 6-bit scale and min j (0..7) of the 12-byte K-quant scale block.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}. 8 sub-blocks of 32.
void DeqQ4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, q += 32) {
    uint8_t sc, mn;
    ScaleMinK4(is, s, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    ScaleMinK4(is + 1, s, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}.
void DeqQ5_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, mn;
    ScaleMinK4(is, s, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    ScaleMinK4(is + 1, s, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}. 16 sub-blocks of 16.
void DeqQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < kQKK; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn BlockDequantizer(DType t) {
  switch (t) {
    case DType::kQ4_0: return DeqQ4_0;
    case DType::kQ4_1: return DeqQ4_1;
    case DType::kQ5_0: return DeqQ5_0;
    case DType::kQ5_1: return DeqQ5_1;
    case DType::kQ8_0: return DeqQ8_0;
    case DType::kQ8_0S24: return DeqQ8_0S24;
    case DType::kQ4_0S24: return DeqQ4_0S24;
    case DType::kQ8_0S48: return DeqQ8_0S48;
    case DType::kW8A8: return DeqQ8_0;  // its blocks are Q8_0's
    case DType::kIQ4_NL: return DeqIq4Nl;
    case DType::kIQ4_XS: return DeqIq4Xs;
    case DType::kIQ3_S: return DeqIq3s;
    case DType::kIQ2_XS: return DeqIq2Xs;
    case DType::kQ2_K: return DeqQ2_K;
    case DType::kQ3_K: return DeqQ3_K;
    case DType::kQ4_K: return DeqQ4_K;
    case DType::kQ5_K: return DeqQ5_K;
    case DType::kQ6_K: return DeqQ6_K;
    default: return nullptr;
  }
}

}  // namespace

int Iq3sSubScaleInt(const uint8_t* b, int ib) { return 1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0x0F); }

float Iq3sSubScale(const uint8_t* b, int ib) { return Half(b) * static_cast<float>(Iq3sSubScaleInt(b, ib)); }

void Iq3sGroupValues(const uint8_t* b, int ib, int8_t* v) {
  const uint8_t* qs = b + 2 + 8 * ib;
  const uint8_t qh = b[66 + ib];
  const uint8_t* signs = b + 74 + 4 * ib;
  for (int k = 0; k < 8; ++k) {
    const uint32_t g = kIq3sGrid[qs[k] | (((qh >> k) & 1) << 8)];
    for (int j = 0; j < 4; ++j) {
      const int e = 4 * k + j;
      const int mag = static_cast<int>((g >> (8 * j)) & 0xFF);
      v[e] = static_cast<int8_t>((signs[e / 8] >> (e % 8)) & 1 ? -mag : mag);
    }
  }
}

int Iq2xsSubScaleInt(const uint8_t* b, int g) { return 1 + 2 * ((b[66 + g / 2] >> (4 * (g % 2))) & 0x0F); }

float Iq2xsSubScale(const uint8_t* b, int g) {
  const int sc = (b[66 + g / 2] >> (4 * (g % 2))) & 0x0F;
  return Half(b) * (0.5f + static_cast<float>(sc)) * 0.25f;
}

void Iq2xsGroupValues(const uint8_t* b, int g, int8_t* v) {
  for (int h = 0; h < 2; ++h) {
    uint16_t q;
    std::memcpy(&q, b + 2 + 2 * (2 * g + h), 2);
    const uint64_t grid = kIq2xsGrid[q & 511];
    unsigned signs = q >> 9;
    signs |= static_cast<unsigned>(__builtin_popcount(signs) & 1) << 7;  // even count of negatives
    for (int j = 0; j < 8; ++j) {
      const int mag = static_cast<int>((grid >> (8 * j)) & 0xFF);
      v[8 * h + j] = static_cast<int8_t>((signs >> j) & 1 ? -mag : mag);
    }
  }
}

int64_t FirstW8A8RowWithMixedScales(const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out) {
  for (int64_t r = 0; r < n_out; ++r) {
    const uint8_t* row = w + r * row_bytes;
    for (int64_t b = 1; b < n_in / kQK; ++b) {
      if (std::memcmp(row, row + b * 34, 2) != 0) return r;
    }
  }
  return -1;
}

int Iq4XsSubScaleInt(const uint8_t* b, int ib) {
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  return (((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
}

float Iq4XsSubScale(const uint8_t* b, int ib) { return Half(b) * static_cast<float>(Iq4XsSubScaleInt(b, ib)); }

bool CanDequantize(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || BlockDequantizer(t) != nullptr;
}

void DequantizeRow(DType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, sizeof(float) * n); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Half(src + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToFp32(h);
      }
      return;
    default: break;
  }
  const BlockFn fn = BlockDequantizer(t);
  CHECK(fn != nullptr);
  const DTypeInfo& info = GetDTypeInfo(t);
  for (int64_t b = 0; b < n / info.block_size; ++b) fn(src + b * info.type_size, dst + b * info.block_size);
}

}  // namespace infera
