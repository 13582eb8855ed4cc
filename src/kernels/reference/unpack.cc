#include "kernels/reference/unpack.h"

#include <cstring>

#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera::reference {
namespace {

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// Each block function unpacks one block: u [block elements], s/m [block / 16].
void UnQ4_0(const uint8_t* b, uint8_t* u, float* s, float* m) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    u[j] = b[2 + j] & 0x0F;
    u[j + 16] = b[2 + j] >> 4;
  }
  s[0] = s[1] = d;
  m[0] = m[1] = 0;
}

void UnQ4_1(const uint8_t* b, uint8_t* u, float* s, float* m) {
  const float d = Half(b), mn = Half(b + 2);
  for (int j = 0; j < 16; ++j) {
    u[j] = b[4 + j] & 0x0F;
    u[j + 16] = b[4 + j] >> 4;
  }
  s[0] = s[1] = d;
  m[0] = m[1] = mn;
}

void UnQ5(const uint8_t* qh_p, const uint8_t* qs, uint8_t* u) {
  uint32_t qh;
  std::memcpy(&qh, qh_p, 4);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
    u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

void UnQ5_0(const uint8_t* b, uint8_t* u, float* s, float* m) {
  UnQ5(b + 2, b + 6, u);
  s[0] = s[1] = Half(b);
  m[0] = m[1] = 0;
}

void UnQ5_1(const uint8_t* b, uint8_t* u, float* s, float* m) {
  UnQ5(b + 4, b + 8, u);
  s[0] = s[1] = Half(b);
  m[0] = m[1] = Half(b + 2);
}

void UnQ8_0(const uint8_t* b, uint8_t* u, float* s, float* m) {
  for (int j = 0; j < 32; ++j) u[j] = b[2 + j] ^ 0x80;
  s[0] = s[1] = Half(b);
  m[0] = m[1] = 0;
}

void UnQ4_0S24(const uint8_t* b, uint8_t* u, float* s, float* m) {
  uint8_t dense[18];
  ExpandQ4_0S24Block(b, dense);
  UnQ4_0(dense, u, s, m);
}

void UnQ8_0S24(const uint8_t* b, uint8_t* u, float* s, float* m) {
  uint8_t dense[34];
  ExpandQ8_0S24Block(b, dense);
  UnQ8_0(dense, u, s, m);
}

void UnQ8_0S48(const uint8_t* b, uint8_t* u, float* s, float* m) {
  uint8_t dense[34];
  ExpandQ8_0S48Block(b, dense);
  UnQ8_0(dense, u, s, m);
}

void UnIq4Nl(const uint8_t* b, uint8_t* u, float* s, float* m) {
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>(kIq4nlValues[b[2 + j] & 0x0F] + 128);
    u[j + 16] = static_cast<uint8_t>(kIq4nlValues[b[2 + j] >> 4] + 128);
  }
  s[0] = s[1] = Half(b);
  m[0] = m[1] = 0;
}

// IQ4_XS: 8 sub-blocks of 32 IQ4_NL values, scale d * (ls - 32) each.
void UnIq4Xs(const uint8_t* b, uint8_t* u, float* s, float* m) {
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* qs = b + 8 + 16 * ib;
    uint8_t* ub = u + 32 * ib;
    for (int j = 0; j < 16; ++j) {
      ub[j] = static_cast<uint8_t>(kIq4nlValues[qs[j] & 0x0F] + 128);
      ub[j + 16] = static_cast<uint8_t>(kIq4nlValues[qs[j] >> 4] + 128);
    }
    s[2 * ib] = s[2 * ib + 1] = Iq4XsSubScale(b, ib);
    m[2 * ib] = m[2 * ib + 1] = 0;
  }
}

// IQ3_S: 8 groups of 32 signed odd values -15..15 (u = v + 128, as IQ4_NL),
// scale d * (1 + 2 * sc) each.
void UnIq3s(const uint8_t* b, uint8_t* u, float* s, float* m) {
  int8_t v[32];
  for (int ib = 0; ib < 8; ++ib) {
    Iq3sGroupValues(b, ib, v);
    for (int j = 0; j < 32; ++j) u[32 * ib + j] = static_cast<uint8_t>(v[j] + 128);
    s[2 * ib] = s[2 * ib + 1] = Iq3sSubScale(b, ib);
    m[2 * ib] = m[2 * ib + 1] = 0;
  }
}

// IQ2_XS: 16 groups of 16 signed values +-8, +-25, +-43 (u = v + 128, as
// Q8_0), scale d * (0.5 + sc) * 0.25 each.
void UnIq2Xs(const uint8_t* b, uint8_t* u, float* s, float* m) {
  int8_t v[16];
  for (int g = 0; g < 16; ++g) {
    Iq2xsGroupValues(b, g, v);
    for (int j = 0; j < 16; ++j) u[16 * g + j] = static_cast<uint8_t>(v[j] + 128);
    s[g] = Iq2xsSubScale(b, g);
    m[g] = 0;
  }
}

// Q2_K: 16 groups of 16, 4-bit scale and min each; value d*sc*q - dmin*mn.
void UnQ2_K(const uint8_t* b, uint8_t* u, float* s, float* m) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half, ++is) {
        s[is] = d * static_cast<float>(scales[is] & 0x0F);
        m[is] = -(dmin * static_cast<float>(scales[is] >> 4));
        for (int l = 0; l < 16; ++l) *u++ = (q[l + 16 * half] >> shift) & 3;
      }
    }
  }
}

// Q3_K: value d*scale*(q3 - 4) where q3 = low 2 bits | (hmask bit << 2).
void UnQ3_K(const uint8_t* b, uint8_t* u, float* s, float* m) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (sc[j] & 0x0F) : (sc[j - 8] >> 4);
    const int high = (sc[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    s[j] = d * static_cast<float>((low | (high << 4)) - 32);
    m[j] = 0;
  }
  uint8_t bit = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, bit <<= 1) {
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 16; ++l) {
          const int idx = l + 16 * half;
          *u++ = static_cast<uint8_t>(((q[idx] >> shift) & 3) | ((hm[idx] & bit) ? 4 : 0));
        }
      }
    }
  }
}

void ScaleMinK4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

// Q4_K / Q5_K: 8 sub-blocks of 32 (two 16-groups each share scale and min).
void KScalesMins(const uint8_t* b, float* s, float* m) {
  const float d = Half(b), dmin = Half(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    ScaleMinK4(j, b + 4, &sc, &mn);
    s[2 * j] = s[2 * j + 1] = d * static_cast<float>(sc);
    m[2 * j] = m[2 * j + 1] = -(dmin * static_cast<float>(mn));
  }
}

void KScaleMinInts(const uint8_t* b, uint16_t* d, uint16_t* dmin, uint8_t* sc, uint8_t* mn) {
  std::memcpy(d, b, 2);
  std::memcpy(dmin, b + 2, 2);
  for (int j = 0; j < 8; ++j) {
    int s, m;
    ScaleMinK4(j, b + 4, &s, &m);
    sc[j] = static_cast<uint8_t>(s);
    mn[j] = static_cast<uint8_t>(m);
  }
}

namespace {

void UnQ4_K(const uint8_t* b, uint8_t* u, float* s, float* m) {
  KScalesMins(b, s, m);
  const uint8_t* q = b + 16;
  for (int j = 0; j < 4; ++j, q += 32) {
    for (int l = 0; l < 32; ++l) *u++ = q[l] & 0x0F;
    for (int l = 0; l < 32; ++l) *u++ = q[l] >> 4;
  }
}

void UnQ5_K(const uint8_t* b, uint8_t* u, float* s, float* m) {
  KScalesMins(b, s, m);
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int j = 0; j < 4; ++j, ql += 32) {
    for (int l = 0; l < 32; ++l) *u++ = static_cast<uint8_t>((ql[l] & 0x0F) | (((qh[l] >> (2 * j)) & 1) << 4));
    for (int l = 0; l < 32; ++l) *u++ = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
  }
}

// Q6_K: 16 groups of 16 with int8 scales; value d*sc*(q6 - 32).
void UnQ6_K(const uint8_t* b, uint8_t* u, float* s, float* m) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int j = 0; j < 16; ++j) {
    s[j] = d * static_cast<float>(sc[j]);
    m[j] = 0;
  }
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, u += 128) {
    for (int l = 0; l < 32; ++l) {
      u[l] = static_cast<uint8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
      u[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      u[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      u[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

using BlockUnpackFn = void (*)(const uint8_t*, uint8_t*, float*, float*);

template <BlockUnpackFn kFn, int kBlock, int kBytes>
void UnpackRow(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16) {
  const int64_t nb = n / kBlock;
  for (int64_t b = 0; b < nb; ++b) kFn(row + b * kBytes, u + b * kBlock, s16 + b * (kBlock / 16), m16 + b * (kBlock / 16));
  const int64_t n_pad = RoundUpToUnit(n);
  std::memset(u + n, 0, n_pad - n);
  for (int64_t g = n / 16; g < n_pad / 16; ++g) s16[g] = m16[g] = 0.0f;
}

}  // namespace

UnpackRowFn ScalarUnpacker(DType t) {
  switch (t) {
    case DType::kQ4_0: return UnpackRow<UnQ4_0, 32, 18>;
    case DType::kQ4_1: return UnpackRow<UnQ4_1, 32, 20>;
    case DType::kQ5_0: return UnpackRow<UnQ5_0, 32, 22>;
    case DType::kQ5_1: return UnpackRow<UnQ5_1, 32, 24>;
    case DType::kQ8_0: return UnpackRow<UnQ8_0, 32, 34>;
    case DType::kQ8_0S24: return UnpackRow<UnQ8_0S24, 32, 22>;
    case DType::kQ4_0S24: return UnpackRow<UnQ4_0S24, 32, kQ4_0S24Bytes>;
    case DType::kQ8_0S48: return UnpackRow<UnQ8_0S48, 32, 22>;
    case DType::kW8A8: return UnpackRow<UnQ8_0, 32, 34>;
    case DType::kIQ4_NL: return UnpackRow<UnIq4Nl, 32, 18>;
    case DType::kIQ4_XS: return UnpackRow<UnIq4Xs, 256, 136>;
    case DType::kIQ3_S: return UnpackRow<UnIq3s, 256, kIq3sBlockBytes>;
    case DType::kIQ2_XS: return UnpackRow<UnIq2Xs, 256, kIq2xsBlockBytes>;
    case DType::kQ2_K: return UnpackRow<UnQ2_K, 256, 84>;
    case DType::kQ3_K: return UnpackRow<UnQ3_K, 256, 110>;
    case DType::kQ4_K: return UnpackRow<UnQ4_K, 256, 144>;
    case DType::kQ5_K: return UnpackRow<UnQ5_K, 256, 176>;
    case DType::kQ6_K: return UnpackRow<UnQ6_K, 256, 210>;
    default: return nullptr;
  }
}

}  // namespace infera::reference
