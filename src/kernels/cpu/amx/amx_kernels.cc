#include "kernels/cpu/amx/amx_kernels.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/amx/tile_config.h"
#include "kernels/cpu/avx512vnni/block_decode512.h"
#include "kernels/qgemm_dispatch.h"

namespace infera::amx {
namespace {

// Two sets of three tiles, used by alternate k-blocks so that one block's
// loads and multiply overlap the previous block's (TileBlock):
//   C (tmm0, tmm3): nt tokens x 16 rows, int32
//   A (tmm1, tmm4): nt tokens x kBlock activation bytes (int8)
//   B (tmm2, tmm5): kBlock / 4 x 64 bytes: the weight block in the packed
//                   layout's order (row c: elements 4c .. 4c+3 of each of
//                   the 16 rows), as int8 u - 2^shift
// The configuration is per thread; each call loads its own (nt varies).
template <int kBlock>
void ConfigureTiles(int nt) {
  TileConfig c;
  for (int set = 0; set < 2; ++set) {
    const int base = 3 * set;
    c.rows[base] = static_cast<uint8_t>(nt);
    c.colsb[base] = 64;
    c.rows[base + 1] = static_cast<uint8_t>(nt);
    c.colsb[base + 1] = kBlock;
    c.rows[base + 2] = kBlock / 4;
    c.colsb[base + 2] = 64;
  }
  LoadTileConfig(c);
}

constexpr int kTileTokens = kQGemmTileTokens;
// k-blocks per phase (below): 8 KiB of B, 16 KiB of C, in L1.
constexpr int kChunk = 16;

// C = A · B for one k-block: A the block's activations at `act` (rows
// `stride` bytes apart), B the decoded block at bt; C stored to ct
// [16][16] int32. Alternate blocks use alternate tile sets, so that one
// block's loads and multiply overlap the previous block's store.
template <int kSet>
inline __attribute__((always_inline)) void TileBlock(const int8_t* act, int64_t stride, const int8_t* bt, int32_t* ct) {
  // (The intrinsics paste the tile number into the instruction: literals.)
  if constexpr (kSet == 0) {
    _tile_loadd(2, bt, 64);
    _tile_loadd(1, act, stride);
    _tile_zero(0);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, ct, 64);
  } else {
    _tile_loadd(5, bt, 64);
    _tile_loadd(4, act, stride);
    _tile_zero(3);
    _tile_dpbssd(3, 4, 5);
    _tile_stored(3, ct, 64);
  }
}

// One 16-row group x nt <= 16 tokens, the QGemmFn contract (kernels.h) bit
// for bit: per k-block the tile unit gives every (token, row) its exact
// integer dot sum(q * (u - 2^shift)) = bias + sum(q * u) (the activations'
// bias folds the same offset), then, in k-block order as the VNNI kernel,
// acc = fma(float(isum), s * da, acc); with mins, a second pass over the
// scales accumulates macc = fma(m, dsum, macc), and y = acc + macc.
// Lane r of each vector is row r; token t's accumulator is acc[t].
//
// The k-blocks go in chunks of kChunk, each in three phases: decode every
// block's B (u - 2^shift as int8: every format's offset integer fits) and
// s into buffers; the tile multiplies, C to a buffer; then the float
// epilogue, so that no tile load waits on stores just issued for it, nor a
// vector load on a tile store just issued (the reason for the phases; the
// device runs could not separate this order from per-block interleaving:
// performance.md, Stage 8 thirteenth part).
template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut>
void QGemmTile(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  using Decode = BlockDecode512<kBits, kBlock, kMin, kF16, kFac, kLut>;
  using Geometry = typename Decode::Geometry;
  const Decode decode(w.format().lut_u);
  const int shift = w.format().shift;
  CHECK(kBits < 8 || shift == 7);  // 8-bit u must be offset to fit int8 (no 8-bit format has mins)
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(shift >= 0 ? 1 << shift : 0));
  const int64_t nb = w.n_blocks();
  ConfigureTiles<kBlock>(nt);
  alignas(64) int8_t bbuf[kChunk][kBlock * 16];
  alignas(64) int32_t cbuf[kChunk][kTileTokens * 16];
  alignas(64) float sbuf[kChunk][16];
  const float* da[kTileTokens];
  __m512 acc[kTileTokens];
  for (int t = 0; t < kTileTokens; ++t) {
    da[t] = a.Da(t0 + std::min(t, nt - 1));
    acc[t] = _mm512_setzero_ps();
  }
  const int8_t* act = a.Q(t0);
  const int64_t stride = a.n;
  const uint8_t* base = w.Block(group, 0);
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int len = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    for (int j = 0; j < len; ++j) {
      const uint8_t *quants, *scales, *super;
      Geometry::BlockAt(base, b0 + j, &quants, &scales, &super);
      __m512i wv[Decode::kVecs];
      decode.Quants(quants, wv);
#pragma GCC unroll 8
      for (int c = 0; c < Decode::kVecs; ++c) _mm512_store_si512(bbuf[j] + 64 * c, _mm512_sub_epi8(wv[c], offset));
      __m512 s, m;
      decode.Scales(scales, super, &s, &m);
      _mm512_store_ps(sbuf[j], s);
    }
    // GCC's tile-load intrinsics take the address as a plain register
    // operand (no memory clobber): this barrier keeps the B stores before them.
    __asm__ volatile("" ::: "memory");
    for (int j = 0; j < len; ++j) {
      if (j & 1) {
        TileBlock<1>(act + (b0 + j) * kBlock, stride, bbuf[j], cbuf[j]);
      } else {
        TileBlock<0>(act + (b0 + j) * kBlock, stride, bbuf[j], cbuf[j]);
      }
    }
    for (int j = 0; j < len; ++j) {
      const __m512 s = _mm512_load_ps(sbuf[j]);
      const int64_t b = b0 + j;
#pragma GCC unroll 16
      for (int t = 0; t < kTileTokens; ++t) {
        if (t < nt) {
          const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf[j] + 16 * t));
          acc[t] = _mm512_fmadd_ps(isum, _mm512_mul_ps(s, _mm512_set1_ps(da[t][b])), acc[t]);
        }
      }
    }
  }
  if constexpr (!kMin) {
#pragma GCC unroll 16
    for (int t = 0; t < kTileTokens; ++t) {
      if (t < nt) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(acc[t], _mm512_setzero_ps()));
    }
  } else {
#pragma GCC unroll 16
    for (int t = 0; t < kTileTokens; ++t) {
      if (t < nt) _mm512_storeu_ps(y + 16 * t, acc[t]);
    }
    const float* dsum[kTileTokens];
    __m512 macc[kTileTokens];
    for (int t = 0; t < kTileTokens; ++t) {
      dsum[t] = a.Dsum(t0 + std::min(t, nt - 1));
      macc[t] = _mm512_setzero_ps();
    }
    Geometry::ForEachBlock(w.Block(group, 0), nb, [&](const uint8_t*, const uint8_t* sp,
                                                      [[maybe_unused]] const uint8_t* super, int64_t b)
                                                      __attribute__((always_inline)) {
      __m512 s, m;
      decode.Scales(sp, super, &s, &m);
#pragma GCC unroll 16
      for (int t = 0; t < kTileTokens; ++t) macc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(dsum[t][b]), macc[t]);
    });
#pragma GCC unroll 16
    for (int t = 0; t < kTileTokens; ++t) {
      if (t < nt) _mm512_storeu_ps(y + 16 * t, _mm512_add_ps(_mm512_loadu_ps(y + 16 * t), macc[t]));
    }
  }
}

struct QGemmTileKernel {
  template <int kBits, int kBlock, bool kMin, bool kF16, bool kFac, bool kLut = false>
  static void Run(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
    QGemmTile<kBits, kBlock, kMin, kF16, kFac, kLut>(w, group, a, t0, nt, y);
  }
};

}  // namespace

void Fill(KernelTable* t) {
  t->isa = CpuIsa::kAmx;
  t->qgemm_tile16 = DispatchPackFormat<QGemmTileKernel>;
  t->qgemm_tile16_variant = "amx-int8";
}

}  // namespace infera::amx
