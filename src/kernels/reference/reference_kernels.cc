#include "kernels/reference/reference_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attend_generic.h"
#include "kernels/flash_bf16_generic.h"
#include "kernels/flash_generic.h"
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

// The defining bf16 dot (Bf16TileFn): 16 lanes, lane l takes the pair
// (i + 2 l, i + 2 l + 1) of each step i of 32 as one VDPBF16PS lane.
template <float (*L)(const uint8_t*, int64_t)>
float DotBf16(const uint8_t* w, const uint16_t* x, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += kBf16Step) {
    for (int l = 0; l < 16; ++l) {
      const int64_t e = i + 2 * l;
      const float w0 = e < n ? RoundToBf16(L(w, e)) : 0.0f;
      const float w1 = e + 1 < n ? RoundToBf16(L(w, e + 1)) : 0.0f;
      acc[l] = DotBf16Pair(acc[l], Bf16ToF32(x[e]), w0, Bf16ToF32(x[e + 1]), w1);
    }
  }
  return Reduce16(acc);
}

template <float (*L)(const uint8_t*, int64_t)>
void Bf16Tile(const uint8_t* w, size_t row_bytes, int nr, const uint16_t* x, int64_t ldx, int nt, int64_t n, float* y,
              int64_t ldy) {
  for (int r = 0; r < nr; ++r) {
    for (int t = 0; t < nt; ++t) y[t * ldy + r] = DotBf16<L>(w + r * row_bytes, x + t * ldx, n);
  }
}

void RoundBf16(const float* x, int64_t n, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = Bf16Round(x[i]);
}

void RowToBf16(DType t, const uint8_t* row, int64_t n, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = Bf16Round(t == DType::kF32 ? LoadF32(row, i) : t == DType::kF16 ? LoadF16(row, i) : LoadBf16(row, i));
  }
}

}  // namespace

void Bf16TileRows(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2, int64_t m,
                  int64_t n, float* y, int64_t ldy) {
  const int64_t padded = RoundUpToBf16Step(n);
  std::vector<float> wr(static_cast<size_t>(padded), 0.0f);
  std::vector<uint16_t> wb(static_cast<size_t>(n));
  for (int r = 0; r < nr; ++r) {
    RowToBf16(type, w + r * row_bytes, n, wb.data());
    for (int64_t e = 0; e < n; ++e) wr[e] = Bf16ToF32(wb[e]);
    for (int64_t t = 0; t < m; ++t) {
      float acc = 0.0f;
      for (int64_t e = 0; e < padded; ++e) {
        const uint32_t pair = x2[(e / 2) * ld2 + t];
        acc = TileDotBf16Step(acc, Bf16ToF32(static_cast<uint16_t>(e % 2 == 0 ? pair : pair >> 16)), wr[e]);
      }
      y[t * ldy + r] = acc;
    }
  }
}

void Bf16Pairs(const uint16_t* xb, int64_t ldx, int64_t m, int64_t n, uint32_t* x2, int64_t ld2) {
  for (int64_t q = 0; q < RoundUpToBf16Step(n) / 2; ++q) {
    for (int64_t t = 0; t < m; ++t) x2[q * ld2 + t] = xb[t * ldx + 2 * q] | uint32_t{xb[t * ldx + 2 * q + 1]} << 16;
  }
}

namespace {

// The sparse-mask layout: each block expanded to Q8_0's dense quants, then
// QGemm's arithmetic.
void QGemmMask(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  constexpr int kR = PackedMatrix::kRows;
  float acc[4][kR] = {}, s[kR];
  uint8_t u[kR][32];
  const uint8_t* p = w.Group(group);
  for (int64_t b = 0; b < w.n_blocks(); ++b) {
    p = PackedMatrix::ExpandMaskBlock(p, u, s);
    for (int i = 0; i < nt; ++i) {
      const int8_t* q = a.Q(t0 + i) + b * 32;
      for (int r = 0; r < kR; ++r) {
        int32_t isum = a.Bias(t0 + i)[b];
        for (int e = 0; e < 32; ++e) isum += u[r][e] * q[e];
        acc[i][r] = std::fma(static_cast<float>(isum), s[r] * a.Da(t0 + i)[b], acc[i][r]);
      }
    }
  }
  for (int i = 0; i < nt; ++i) {
    for (int r = 0; r < kR; ++r) y[i * kR + r] = acc[i][r] + 0.0f;
  }
}

// A sparse group as the dense Q8_0 or Q4_0 it stands for (see ExpandSparseFn).
void ExpandSparse(const PackedMatrix& w, int64_t group, PackedMatrix* dense) {
  constexpr int kR = PackedMatrix::kRows;
  const PackFormat& f = w.format();
  uint8_t u[kR][32];
  float s[kR];
  const uint8_t* p = f.sparse_mask ? w.Group(group) : nullptr;
  for (int64_t b = 0; b < w.n_blocks(); ++b) {
    if (f.sparse_mask) {
      std::memcpy(dense->MutableScales(b), p + 64, 2 * kR);  // the f16 scales as stored
      p = PackedMatrix::ExpandMaskBlock(p, u, s);
    } else {
      for (int r = 0; r < kR; ++r) {
        for (int e = 0; e < 32; ++e) u[r][e] = static_cast<uint8_t>(PackedMatrix::Quant(f, w.Block(group, b), r, e));
      }
      std::memcpy(dense->MutableScales(b), w.Scales(group, b), 2 * kR);
    }
    uint8_t* blk = dense->MutableBlock(b);
    if (dense->format().bits == 4) {  // Q4_0: low nibbles elements 0..15, high 16..31
      for (int r = 0; r < kR; ++r) {
        for (int e = 0; e < 16; ++e) blk[(e / 4) * 64 + 4 * r + e % 4] = static_cast<uint8_t>(u[r][e] | u[r][e + 16] << 4);
      }
      continue;
    }
    for (int r = 0; r < kR; ++r) {
      for (int e = 0; e < 32; ++e) blk[(e / 4) * 64 + 4 * r + e % 4] = u[r][e];
    }
  }
}

// The defining quantized matmul on packed weights (see QGemmFn).
void QGemm(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  const PackFormat& f = w.format();
  constexpr int kR = PackedMatrix::kRows;
  if (f.sparse_mask) return QGemmMask(w, group, a, t0, nt, y);
  for (int i = 0; i < nt; ++i) {
    const int8_t* q = a.Q(t0 + i);
    const int32_t* bias = a.Bias(t0 + i);
    const float* da = a.Da(t0 + i);
    const float* dsum = a.Dsum(t0 + i);
    for (int r = 0; r < kR; ++r) {
      float acc = 0, macc = 0;
      for (int64_t b = 0; b < w.n_blocks(); ++b) {
        const uint8_t* blk = w.Block(group, b);
        int32_t isum = bias[b];
        for (int e = 0; e < f.block; ++e) isum += PackedMatrix::Quant(f, blk, r, e) * q[b * f.block + e];
        acc = std::fma(static_cast<float>(isum), w.Scale(group, b, r) * da[b], acc);
        if (f.has_min) macc = std::fma(w.Min(group, b, r), dsum[b], macc);
      }
      y[i * kR + r] = acc + macc;
    }
  }
}

// Row-scaled weights (W8A8): one integer dot per row and token, one multiply.
void QGemmRow(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  const PackFormat& f = w.format();
  constexpr int kR = PackedMatrix::kRows;
  for (int i = 0; i < nt; ++i) {
    const int8_t* q = a.Q(t0 + i);
    for (int r = 0; r < kR; ++r) {
      int32_t isum = a.Bias(t0 + i)[0];
      for (int64_t b = 0; b < w.n_blocks(); ++b) {
        const uint8_t* blk = w.Block(group, b);
        for (int e = 0; e < f.block; ++e) isum += PackedMatrix::Quant(f, blk, r, e) * q[b * f.block + e];
      }
      y[i * kR + r] = static_cast<float>(isum) * (w.Scale(group, 0, r) * a.Da(t0 + i)[0]);
    }
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
  t->qgemm_variant = "scalar";
  t->tile_f32 = FloatTile<LoadF32>;
  t->tile_f16 = FloatTile<LoadF16>;
  t->tile_bf16 = FloatTile<LoadBf16>;
  t->bf16_tile_f32 = Bf16Tile<LoadF32>;
  t->bf16_tile_f16 = Bf16Tile<LoadF16>;
  t->bf16_tile_bf16 = Bf16Tile<LoadBf16>;
  t->round_bf16 = RoundBf16;
  t->row_to_bf16 = RowToBf16;
  t->qgemm = QGemm;
  t->qgemm_sparse24 = QGemm;
  t->qgemm_sparse_mask = QGemm;
  t->expand_sparse24 = ExpandSparse;
  t->expand_sparse_mask = ExpandSparse;
  t->quantize_token = QuantizeTokenReference;
  t->qgemm_row = QGemmRow;
  t->qgemm_row_variant = "scalar";
  t->quantize_token_row = QuantizeTokenRowReference;
  t->dot_f32 = DotF32;
  t->axpy_f32 = AxpyF32;
  t->attend_head = AttendHeadComposed<DotF32, AxpyF32>;
  t->flash_chunk = FlashChunkGeneric;
  t->flash_merge = FlashMergeGeneric;
  t->flash_chunk_bf16 = FlashChunkGenericBf16;
  t->flash_bf16_variant = "scalar (bf16 emulated)";
  t->silu_mul = SiluMulGeneric;
  t->gelu_tanh_mul = GeluTanhMulGeneric;
  t->soft_cap = SoftCapGeneric;
}

}  // namespace infera::reference
