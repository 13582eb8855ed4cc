// IEEE half and bfloat16 <-> float conversions (scalar, exact, portable).
#pragma once

#include <cstdint>
#include <cstring>

namespace infera {

inline float Fp32FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t Fp32ToBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Exact half -> float (handles subnormals, inf, nan).
inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return Fp32FromBits(sign);
    // subnormal: normalize
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return Fp32FromBits(sign | ((127 - 15 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return Fp32FromBits(sign | 0x7f800000u | (mant << 13));
  return Fp32FromBits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// float -> half, round to nearest even (same results as F16C's vcvtps2ph).
inline uint16_t Fp32ToFp16(float f) {
  uint32_t x = Fp32ToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (x < 0x38800000u) {  // subnormal or zero in half
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((x - 0x38000000u) >> 13);
  const uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return static_cast<uint16_t>(sign | r);
}

inline float Bf16ToFp32(uint16_t b) { return Fp32FromBits(static_cast<uint32_t>(b) << 16); }

// float -> bf16, round to nearest even; NaN stays NaN.
inline uint16_t Fp32ToBf16(float f) {
  uint32_t x = Fp32ToBits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace infera
