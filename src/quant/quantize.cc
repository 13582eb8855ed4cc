#include "quant/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "quant/kquants.h"
#include "quant/quant_search.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

using kquants::PutHalf;

// Q8_0: d = amax / 127, q = round(x / d).
void QuantQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutHalf(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

// W8A8: one scale per row, d = f16(max |x| / 127), written into every
// 32-block of the row; q = round(x / d) against the stored (f16) d, clamped to
// [-127, 127].
void QuantizeW8A8Row(const float* x, uint8_t* dst, int64_t n) {
  float amax = 0;
  for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint16_t dh = Fp32ToFp16(amax / 127.0f);
  const float d = Fp16ToFp32(dh);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint8_t* blk = dst + b * 34;
    std::memcpy(blk, &dh, 2);
    for (int j = 0; j < 32; ++j) {
      const float q = std::clamp(std::roundf(x[b * 32 + j] * id), -127.0f, 127.0f);
      blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

// Q8_0_S24: Q8_0's quants, the two largest of each 4-group kept.
void QuantQ8_0S24(const float* x, uint8_t* b) {
  uint8_t dense[34];
  QuantQ8_0(x, dense);
  CompressQ8_0Block24(dense, b);
}

// Q8_0_S48: Q8_0's quants, the four largest of each 8-group kept.
void QuantQ8_0S48(const float* x, uint8_t* b) {
  uint8_t dense[34];
  QuantQ8_0(x, dense);
  CompressQ8_0Block48(dense, b);
}

// Q4_0: d = max / -8; q = min(15, (int8)(x / d + 8.5)).
void QuantQ4_0(const float* x, uint8_t* b) {
  const float d = kquants::SignedAbsMax(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutHalf(b, d);
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x[j] * id + 8.5f)));
    const uint8_t hi = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void MinMax(const float* x, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = min(15, (int8)((x - m) / d + 0.5)).
void QuantQ4_1(const float* x, uint8_t* b) {
  float mn, mx;
  MinMax(x, &mn, &mx);
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutHalf(b, d);
  PutHalf(b + 2, mn);
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>((x[j] - mn) * id + 0.5f)));
    const uint8_t hi = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f)));
    b[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q5_0: d = max / -16; q = min(31, (int8)(x / d + 16.5)); 5th bits in qh.
void QuantQ5_0(const float* x, uint8_t* b) {
  const float d = kquants::SignedAbsMax(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutHalf(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t q0 = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(x[j] * id + 16.5f)));
    const uint8_t q1 = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    b[6 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(b + 2, &qh, 4);
}

// Q5_1: d = (max - min) / 31, m = min, q = (uint8)((x - m) / d + 0.5).
void QuantQ5_1(const float* x, uint8_t* b) {
  float mn, mx;
  MinMax(x, &mn, &mx);
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutHalf(b, d);
  PutHalf(b + 2, mn);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t q0 = static_cast<uint8_t>((x[j] - mn) * id + 0.5f);
    const uint8_t q1 = static_cast<uint8_t>((x[j + 16] - mn) * id + 0.5f);
    b[8 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(b + 4, &qh, 4);
}

// The importance-weighted legacy quantizers (llama.cpp's
// quantize_row_q4_0_impl ...): weights qw[j] * sqrt(sigma2 + x[j]^2) with
// sigma2 the row's mean square.
void WeightsForBlock(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < 32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

void PutNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

// 5-bit quants L [32]: low nibbles to qs [16], fifth bits to qh (4 bytes).
void PutFiveBits(const uint8_t* L, uint8_t* qh_dst, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((L[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((L[j + 16] & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(qh_dst, &qh, 4);
}

void QuantQ4_0Weighted(const float* x, const float* qw, float sigma2, uint8_t* b) {
  float w[32];
  int8_t L[32];
  WeightsForBlock(x, qw, sigma2, w);
  PutHalf(b, kquants::MakeQxQuants(32, 8, x, L, w));
  PutNibbles(reinterpret_cast<const uint8_t*>(L), b + 2);
}

void QuantQ5_0Weighted(const float* x, const float* qw, float sigma2, uint8_t* b) {
  float w[32];
  int8_t L[32];
  WeightsForBlock(x, qw, sigma2, w);
  PutHalf(b, kquants::MakeQxQuants(32, 16, x, L, w));
  PutFiveBits(reinterpret_cast<const uint8_t*>(L), b + 2, b + 6);
}

// Q4_1 / Q5_1 (nmax 15 / 31): scale and min by make_qkx3_quants.
void QuantQx1Weighted(const float* x, const float* qw, float sigma2, int nmax, uint8_t* b, uint8_t* L) {
  float w[32], min;
  uint8_t Laux[32];
  WeightsForBlock(x, qw, sigma2, w);
  const float d = kquants::MakeQkx3Quants(32, nmax, x, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
  PutHalf(b, d);
  PutHalf(b + 2, -min);
}

void QuantQ4_1Weighted(const float* x, const float* qw, float sigma2, uint8_t* b) {
  uint8_t L[32];
  QuantQx1Weighted(x, qw, sigma2, 15, b, L);
  PutNibbles(L, b + 4);
}

void QuantQ5_1Weighted(const float* x, const float* qw, float sigma2, uint8_t* b) {
  uint8_t L[32];
  QuantQx1Weighted(x, qw, sigma2, 31, b, L);
  PutFiveBits(L, b + 4, b + 8);
}

// One block: x [block], qw [block] (null: the reference path), sigma2 the
// row's mean square (used by the legacy weighted quantizers only).
using BlockFn = void (*)(const float* x, const float* qw, float sigma2, uint8_t* block);

template <void (*Ref)(const float*, uint8_t*)>
void Unweighted(const float* x, const float*, float, uint8_t* b) {
  Ref(x, b);
}

template <void (*Ref)(const float*, uint8_t*), void (*Weighted)(const float*, const float*, float, uint8_t*)>
void Legacy(const float* x, const float* qw, float sigma2, uint8_t* b) {
  if (qw == nullptr) Ref(x, b);
  else Weighted(x, qw, sigma2, b);
}

// Q4_0_S24: Q4_0's values (with or without importance weights), the two
// largest of each 4-group kept.
void QuantQ4_0S24(const float* x, const float* qw, float sigma2, uint8_t* b) {
  uint8_t dense[18];
  Legacy<QuantQ4_0, QuantQ4_0Weighted>(x, qw, sigma2, dense);
  CompressQ4_0Block24(dense, b);
}

template <void (*Fn)(const float*, const float*, uint8_t*)>
void Super(const float* x, const float* qw, float, uint8_t* b) {
  Fn(x, qw, b);
}

BlockFn BlockQuantizer(DType t) {
  switch (t) {
    case DType::kQ8_0: return Unweighted<QuantQ8_0>;
    case DType::kQ8_0S24: return Unweighted<QuantQ8_0S24>;
    case DType::kQ8_0S48: return Unweighted<QuantQ8_0S48>;
    case DType::kQ4_0S24: return QuantQ4_0S24;
    case DType::kQ4_0: return Legacy<QuantQ4_0, QuantQ4_0Weighted>;
    case DType::kQ4_1: return Legacy<QuantQ4_1, QuantQ4_1Weighted>;
    case DType::kQ5_0: return Legacy<QuantQ5_0, QuantQ5_0Weighted>;
    case DType::kQ5_1: return Legacy<QuantQ5_1, QuantQ5_1Weighted>;
    case DType::kQ2_K: return Super<kquants::QuantizeQ2_K>;
    case DType::kQ3_K: return Super<kquants::QuantizeQ3_K>;
    case DType::kQ4_K: return Super<kquants::QuantizeQ4_K>;
    case DType::kQ5_K: return Super<kquants::QuantizeQ5_K>;
    case DType::kQ6_K: return Super<kquants::QuantizeQ6_K>;
    case DType::kIQ4_NL: return Super<kquants::QuantizeIq4Nl>;
    case DType::kIQ4_XS: return Super<kquants::QuantizeIq4Xs>;
    case DType::kIQ3_S: return Super<kquants::QuantizeIq3s>;
    case DType::kIQ2_XS: return Super<kquants::QuantizeIq2Xs>;
    default: return nullptr;
  }
}

}  // namespace

void PackLegacyBlock(DType t, const int8_t* codes, float d, float m, uint8_t* b) {
  const auto* L = reinterpret_cast<const uint8_t*>(codes);
  PutHalf(b, d);
  switch (t) {
    case DType::kQ4_0: PutNibbles(L, b + 2); return;
    case DType::kQ5_0: PutFiveBits(L, b + 2, b + 6); return;
    case DType::kQ8_0: std::memcpy(b + 2, codes, 32); return;
    case DType::kQ4_1:
      PutHalf(b + 2, m);
      PutNibbles(L, b + 4);
      return;
    case DType::kQ5_1:
      PutHalf(b + 2, m);
      PutFiveBits(L, b + 4, b + 8);
      return;
    default: CHECK(false);
  }
}

bool CanQuantize(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kW8A8 || BlockQuantizer(t) != nullptr;
}

void QuantizeRow(DType t, const float* x, uint8_t* dst, int64_t n, const float* importance) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, x, sizeof(float) * n); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = Fp32ToFp16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = Fp32ToBf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kW8A8: QuantizeW8A8Row(x, dst, n); return;  // (importance: the row scale has no choice to weigh)
    default: break;
  }
  const BlockFn fn = BlockQuantizer(t);
  CHECK(fn != nullptr);
  const DTypeInfo& info = GetDTypeInfo(t);
  float sigma2 = 0;
  if (importance != nullptr) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    sigma2 = sum_x2 / static_cast<float>(n);
  }
  for (int64_t b = 0; b < n / info.block_size; ++b) {
    const int64_t off = b * info.block_size;
    fn(x + off, importance ? importance + off : nullptr, sigma2, dst + b * info.type_size);
  }
}

uint32_t LlamaFileType(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 12;  // llama-quantize's "Q3_K" is Q3_K_M
    case DType::kQ4_K: return 15;
    case DType::kQ5_K: return 17;
    case DType::kQ6_K: return 18;
    case DType::kIQ4_NL: return 25;
    case DType::kIQ4_XS: return 30;
    case DType::kIQ3_S: return 26;
    case DType::kIQ2_XS: return 20;
    case DType::kBF16: return 32;
    // infera's own types: llama.cpp's LLAMA_FTYPE_GUESSED ("not specified").
    case DType::kQ8_0S24:
    case DType::kQ8_0S48:
    case DType::kQ4_0S24:
    case DType::kW8A8: return 1024;
    default: return 0;
  }
}

}  // namespace infera
