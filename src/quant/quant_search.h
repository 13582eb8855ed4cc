// The scale searches behind llama.cpp's quantizers (ggml-quants.c
// make_*_quants), shared by the reference quantizers (kquants.cc) and the
// importance-weighted ones (imatrix_quants.cc). Each follows llama.cpp's
// float arithmetic step by step so that the bytes agree: do not reorder.
// All are pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/fp16.h"

namespace infera::kquants {

// Round to nearest, ties to even, for |v| < 2^22 (the magic-number trick).
inline int NearestInt(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline void PutHalf(uint8_t* p, float v) {
  const uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
}
inline float GetHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// The element of x [n] with the largest magnitude, sign included (the first
// one on ties; 0 for an all-zero x).
float SignedAbsMax(const float* x, int n);

// Symmetric quants L [n] in [0, 2 nmax) (value + nmax) with the weighted
// least-squares scale refined over 18 nearby trial scales; weights qw [n],
// or x^2 when qw is null. Returns the scale.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, const float* qw);

// 3-bit symmetric quants with coordinate-descent refinement (x^2 weights);
// L in [0, 2 nmax).
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L);

// Asymmetric quants L in [0, nmax] (x ≈ scale * L - the_min) with scale and
// min chosen by weighted least squares over nstep + 1 trial scales.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                     uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);
// The importance-weighted variant (weights null: x^2), as llama.cpp's
// make_qkx3_quants.
float MakeQkx3Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                     uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);

// Non-negative x [n] (sub-block scales or mins) quantized to L in [0, nmax]
// with weights quant_weights [n]: a scale search then coordinate descent.
float MakeQpQuants(int n, int nmax, const float* x, uint8_t* L, const float* quant_weights);

// Index of the value of val [n] (ascending) nearest to x.
int BestIndexInt8(int n, const int8_t* val, float x);

}  // namespace infera::kquants
