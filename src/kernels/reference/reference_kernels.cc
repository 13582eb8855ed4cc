#include "kernels/reference/reference_kernels.h"

#include <cmath>
#include <cstring>

#include "kernels/reference/unpack.h"
#include "tensor/fp16.h"

namespace infera::reference {
namespace {

float LoadF32(const uint8_t* w, int64_t i) {
  float v;
  std::memcpy(&v, w + i * 4, 4);
  return v;
}
float LoadF16(const uint8_t* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, w + i * 2, 2);
  return Fp16ToFp32(h);
}
float LoadBf16(const uint8_t* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, w + i * 2, 2);
  return Bf16ToFp32(h);
}

// The defining float dot: 16 lanes, lane l accumulates elements i ≡ l (mod 16)
// with fused multiply-adds in order; the last partial vector adds 0 * 0 in the
// lanes past n (as a masked SIMD load does); then Reduce16.
template <float (*L)(const uint8_t*, int64_t)>
float Dot16(const uint8_t* w, const float* x, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      acc[l] = i + l < n ? std::fma(L(w, i + l), x[i + l], acc[l]) : std::fma(0.0f, 0.0f, acc[l]);
    }
  }
  return Reduce16(acc);
}

template <float (*L)(const uint8_t*, int64_t)>
void FloatTile(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx, int nt, int64_t n, float* y,
               int64_t ldy) {
  for (int r = 0; r < nr; ++r) {
    for (int t = 0; t < nt; ++t) y[t * ldy + r] = Dot16<L>(w + r * row_bytes, x + t * ldx, n);
  }
}

// The defining quantized dot: per 256-element unit, c[g] = s16[g] * da16[g];
// lane l of 64-byte chunk j holds the integer sum of 4 products u * q plus
// bias4 and accumulates fma(isum, c[4j + l/4]); with mins, lane g of a second
// accumulator takes fma(m16[g], ms16[g]) per unit.
void QDot(const uint8_t* u, const float* s16, const float* m16, bool has_min, const QuantActs& a, int64_t t0, int nt,
          float* y, int64_t ldy) {
  for (int i = 0; i < nt; ++i) {
    const int8_t* q = a.Q(t0 + i);
    const int32_t* bias4 = a.Bias4(t0 + i);
    const float* da16 = a.Da16(t0 + i);
    const float* ms16 = a.Ms16(t0 + i);
    float acc[16] = {}, macc[16] = {};
    for (int64_t k = 0; k < a.n_pad; k += kQUnit) {
      const int64_t g0 = k / 16;
      float c[16];
      for (int g = 0; g < 16; ++g) c[g] = s16[g0 + g] * da16[g0 + g];
      if (has_min) {
        for (int g = 0; g < 16; ++g) macc[g] = std::fma(m16[g0 + g], ms16[g0 + g], macc[g]);
      }
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 16; ++l) {
          const int64_t e = k + 64 * j + 4 * l;
          int32_t isum = bias4[e / 4];
          for (int b = 0; b < 4; ++b) isum += static_cast<int32_t>(u[e + b]) * q[e + b];
          acc[l] = std::fma(static_cast<float>(isum), c[4 * j + l / 4], acc[l]);
        }
      }
    }
    y[i * ldy] = Reduce16(acc) + (has_min ? Reduce16(macc) : 0.0f);
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  return Dot16<LoadF32>(reinterpret_cast<const uint8_t*>(a), b, n);
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kScalar;
  t->qdot_variant = "scalar";
  t->tile_f32 = FloatTile<LoadF32>;
  t->tile_f16 = FloatTile<LoadF16>;
  t->tile_bf16 = FloatTile<LoadBf16>;
  t->qdot = QDot;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
  for (size_t i = 0; i < t->unpack.size(); ++i) t->unpack[i] = ScalarUnpacker(static_cast<DType>(i));
}

}  // namespace infera::reference
