// Float-weight matmuls with bf16 products on the AMX-BF16 tile unit
// (KernelTable::bf16_tile_rows and bf16_pairs; the tile form of the bf16
// dot, kernels.h's Bf16TileRowsFn). Compiled with AVX-512 F/BW/VL/DQ and
// BF16 (the conversions) and AMX-TILE / AMX-BF16.
//
// One call: up to 32 weight rows against every token, the weights as the A
// tiles (two groups of 16 rows, 32 bf16 of one step each: the rows as they
// lie, BF16 in place, F32 / F16 converted once per call into this thread's
// buffer) and the activations as the B tiles (16 pairs x 16 tokens of the
// transposed pairs, Bf16PairsFn, made once per matmul). Tokens go 32 at a
// time into four C tiles of 16 rows x 16 tokens, every step accumulated in
// order: each (row, token) is one f32 chain in element order, whatever the
// number of tokens in the call (batch invariance). For one token (decode)
// the B tile is one column wide and the cost is the A tiles' loads.
//
// The kernel is written once over a tile unit: the hardware
// (HardwareTiles), or a software model of the instructions as their
// pseudo-code defines them (EmulatedTiles), which the tests run on CPUs
// without AMX to check the layouts, the configuration and the loops bit for
// bit against the scalar definition (reference::Bf16TileRows).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/bf16_generic.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/cpu/amx/tile_config.h"

namespace infera::amx {
namespace {

// Tiles: C[grp][tok] = tmm(2 grp + tok), A[grp] = tmm(4 + grp) (weights),
// B[tok] = tmm(6 + tok) (activations).
constexpr int kStepBytes = 64;  // one step of 32 bf16 in a row of A

// The hardware unit. The tile number is part of each instruction (an
// immediate in the asm); every access names memory as clobbered, so that
// buffers written just before a tile load are stored, and those read after
// a tile store are read after it.
struct HardwareTiles {
  void Configure(const TileConfig& c) { LoadTileConfig(c); }
  template <int kT>
  void Zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(kT));
  }
  template <int kT>
  void Load(const void* p, int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(kT) : "memory");
  }
  template <int kC, int kA, int kB>
  void Dot() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
  }
  template <int kT>
  void Store(void* p, int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(kT) : "memory");
  }
};

// The same instructions in software, as the Intel SDM's pseudo-code reads:
// loads fill `rows` rows of `colsb` bytes and zero the rest; TDPBF16PS
// checks the shapes the hardware would fault on and, per (m, n), adds the
// pairs' products in k order, the even element first, each a fused
// multiply-add with denormal inputs read as zero and denormal results
// flushed (TileDotBf16Step).
class EmulatedTiles {
 public:
  void Configure(const TileConfig& c) {
    CHECK(c.palette == 1);
    for (int i = 0; i < 8; ++i) CHECK(c.rows[i] <= 16 && c.colsb[i] <= 64 && (c.rows[i] == 0) == (c.colsb[i] == 0));
    cfg_ = c;
    std::memset(tiles_, 0, sizeof(tiles_));
  }
  template <int kT>
  void Zero() {
    Used(kT);
    std::memset(tiles_[kT], 0, sizeof(tiles_[kT]));
  }
  template <int kT>
  void Load(const void* p, int64_t stride) {
    Used(kT);
    std::memset(tiles_[kT], 0, sizeof(tiles_[kT]));
    for (int r = 0; r < cfg_.rows[kT]; ++r) {
      std::memcpy(tiles_[kT][r], static_cast<const uint8_t*>(p) + r * stride, cfg_.colsb[kT]);
    }
  }
  template <int kC, int kA, int kB>
  void Dot() {
    Used(kC), Used(kA), Used(kB);
    // The shapes TDPBF16PS requires (#UD otherwise).
    CHECK(cfg_.rows[kC] == cfg_.rows[kA] && cfg_.colsb[kA] % 4 == 0 && cfg_.colsb[kA] / 4 == cfg_.rows[kB] &&
          cfg_.colsb[kC] == cfg_.colsb[kB] && cfg_.colsb[kC] % 4 == 0);
    for (int m = 0; m < cfg_.rows[kC]; ++m) {
      float c[16];
      std::memcpy(c, tiles_[kC][m], 64);
      for (int k = 0; k < cfg_.colsb[kA] / 4; ++k) {
        for (int n = 0; n < cfg_.colsb[kC] / 4; ++n) {
          for (int j = 0; j < 2; ++j) {
            c[n] =
                TileDotBf16Step(c[n], Operand(tiles_[kA][m] + 4 * k + 2 * j), Operand(tiles_[kB][k] + 4 * n + 2 * j));
          }
        }
      }
      std::memcpy(tiles_[kC][m], c, cfg_.colsb[kC]);
    }
  }
  template <int kT>
  void Store(void* p, int64_t stride) {
    Used(kT);
    for (int r = 0; r < cfg_.rows[kT]; ++r) {
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, tiles_[kT][r], cfg_.colsb[kT]);
    }
  }

 private:
  void Used(int t) const {
    CHECK(cfg_.rows[t] != 0);  // used but not configured (#UD)
  }
  static float Operand(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return FlushDenormal(Bf16ToF32(h));
  }

  TileConfig cfg_;
  alignas(64) uint8_t tiles_[8][16][64] = {};
};

// 32 weights of a float row from element e0 (those past n: 0) as bf16
// words in element order, each Bf16Round of its f32 value (VCVTNEPS2BF16,
// as RowToBf16).
inline __m512i RowStep(DType type, const uint8_t* row, int64_t e0, int64_t n) {
  const int64_t left = std::min<int64_t>(32, n - e0);
  const __mmask32 m32 = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << left) - 1);
  __m512 lo, hi;
  if (type == DType::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + e0;
    lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m32), p);
    hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m32 >> 16), p + 16);
  } else {
    const __m512i h = _mm512_maskz_loadu_epi16(m32, row + 2 * e0);
    const __m256i h0 = _mm512_castsi512_si256(h), h1 = _mm512_extracti64x4_epi64(h, 1);
    if (type == DType::kF16) {
      lo = _mm512_cvtph_ps(h0);
      hi = _mm512_cvtph_ps(h1);
    } else {  // bf16 widened exactly, then rounded as RowToBf16 does
      lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
      hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
    }
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// v[i] (16 dwords each) -> v[j] holds dword j of every v[i] (a 16 x 16
// transpose of dwords: here, of 16 tokens' bf16 pairs).
inline void Transpose16(__m512i v[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // u[4 i + j], 128-bit lane L: dword 4 L + j of rows 4 i .. 4 i + 3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    v[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    v[8 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    v[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// A float row of n -> bf16 [padded] (RowToBf16's bits, zeros past n),
// fetching the next row (`next`, null for none) as it goes: rows are
// usually a page or more long, where the hardware's streams stop.
void ConvertRow(DType type, const uint8_t* row, const uint8_t* next, int64_t n, int64_t padded, uint16_t* out) {
  const int esz = type == DType::kF32 ? 4 : 2;
  for (int64_t e = 0; e < padded; e += 32) {
    if (next != nullptr) {
      for (int c = 0; c < esz / 2; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(next + esz * e + 64 * c), _MM_HINT_T0);
    }
    _mm512_storeu_si512(out + e, RowStep(type, row, e, n));
  }
}

TileConfig ConfigFor(const int rows[2], const int cols[2]) {
  TileConfig c;
  for (int g = 0; g < 2; ++g) {
    if (rows[g] == 0) continue;
    for (int tok = 0; tok < 2; ++tok) {
      if (cols[tok] == 0) continue;
      c.rows[2 * g + tok] = static_cast<uint8_t>(rows[g]);
      c.colsb[2 * g + tok] = static_cast<uint16_t>(4 * cols[tok]);
    }
    c.rows[4 + g] = static_cast<uint8_t>(rows[g]);
    c.colsb[4 + g] = kStepBytes;
  }
  for (int tok = 0; tok < 2; ++tok) {
    if (cols[tok] == 0) continue;
    c.rows[6 + tok] = 16;
    c.colsb[6 + tok] = static_cast<uint16_t>(4 * cols[tok]);
  }
  return c;
}

// One or two groups of rows (A: a + 64 s, rows `sa` bytes apart) x up to
// 32 tokens (B: x0 / x1, pair rows `sb` bytes apart), every step; the C
// tiles stored to c [4][16][16] (C[grp][tok] at c[2 grp + tok]).
template <bool kTwoGroup, bool kTwoTok, class Unit>
void Block(Unit& u, const uint8_t* a, int64_t sa, const uint32_t* x0, const uint32_t* x1, int64_t sb, int64_t steps,
           float (*c)[16][16]) {
  u.template Zero<0>();
  if constexpr (kTwoTok) u.template Zero<1>();
  if constexpr (kTwoGroup) {
    u.template Zero<2>();
    if constexpr (kTwoTok) u.template Zero<3>();
  }
  const int64_t step_pairs = sb / 4 * 16;  // uint32 per step of B
  for (int64_t s = 0; s < steps; ++s) {
    u.template Load<4>(a + kStepBytes * s, sa);
    u.template Load<6>(x0 + s * step_pairs, sb);
    u.template Dot<0, 4, 6>();
    if constexpr (kTwoTok) {
      u.template Load<7>(x1 + s * step_pairs, sb);
      u.template Dot<1, 4, 7>();
    }
    if constexpr (kTwoGroup) {
      u.template Load<5>(a + 16 * sa + kStepBytes * s, sa);
      u.template Dot<2, 5, 6>();
      if constexpr (kTwoTok) u.template Dot<3, 5, 7>();
    }
  }
  u.template Store<0>(c[0], 64);
  if constexpr (kTwoTok) u.template Store<1>(c[1], 64);
  if constexpr (kTwoGroup) {
    u.template Store<2>(c[2], 64);
    if constexpr (kTwoTok) u.template Store<3>(c[3], 64);
  }
}

template <class Unit>
void TileRows(Unit& u, DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2,
              int64_t m, int64_t n, float* y, int64_t ldy) {
  CHECK(nr >= 1 && nr <= kBf16TileRows && n >= 1 && ld2 >= m);
  CHECK(type == DType::kF32 || type == DType::kF16 || type == DType::kBF16);
  const int64_t padded = RoundUpToBf16Step(n), steps = padded / kBf16Step;
  const int rows[2] = {std::min(16, nr), std::max(0, nr - 16)};
  // A: BF16 rows of whole steps in place (the unit reads denormals as zero,
  // as RowToBf16 makes them); others converted, rows of `padded`.
  const uint8_t* a = w;
  int64_t sa = static_cast<int64_t>(row_bytes);
  thread_local std::vector<uint16_t> abuf;  // this thread's (grows once)
  if (type != DType::kBF16 || n % kBf16Step != 0) {
    abuf.resize(static_cast<size_t>(nr * padded));
    for (int r = 0; r < nr; ++r) {
      const uint8_t* row = w + r * row_bytes;
      ConvertRow(type, row, r + 1 < nr ? row + row_bytes : nullptr, n, padded, abuf.data() + r * padded);
    }
    a = reinterpret_cast<const uint8_t*>(abuf.data());
    sa = 2 * padded;
  }
  alignas(64) float c[4][16][16];
  int configured[2] = {-1, -1};
  for (int64_t t0 = 0; t0 < m; t0 += 32) {
    const int cols[2] = {static_cast<int>(std::min<int64_t>(16, m - t0)),
                         static_cast<int>(std::clamp<int64_t>(m - t0 - 16, 0, 16))};
    if (cols[0] != configured[0] || cols[1] != configured[1]) {
      u.Configure(ConfigFor(rows, cols));
      configured[0] = cols[0], configured[1] = cols[1];
    }
    const uint32_t* x0 = x2 + t0;
    const uint32_t* x1 = x0 + 16;
    const int64_t sb = 4 * ld2;
    if (cols[1] > 0) {
      if (rows[1] > 0) {
        Block<true, true>(u, a, sa, x0, x1, sb, steps, c);
      } else {
        Block<false, true>(u, a, sa, x0, x1, sb, steps, c);
      }
    } else if (rows[1] > 0) {
      Block<true, false>(u, a, sa, x0, x1, sb, steps, c);
    } else {
      Block<false, false>(u, a, sa, x0, x1, sb, steps, c);
    }
    for (int g = 0; g < 2; ++g) {
      for (int tok = 0; tok < 2; ++tok) {
        for (int r = 0; r < rows[g]; ++r) {
          for (int i = 0; i < cols[tok]; ++i) y[(t0 + 16 * tok + i) * ldy + 16 * g + r] = c[2 * g + tok][r][i];
        }
      }
    }
  }
}

// xb -> x2 (Bf16PairsFn): 16 tokens x 16 pairs per transpose, the last
// tokens one at a time.
void Pairs(const uint16_t* xb, int64_t ldx, int64_t m, int64_t n, uint32_t* x2, int64_t ld2) {
  const int64_t padded = RoundUpToBf16Step(n);
  int64_t t0 = 0;
  for (; t0 + 16 <= m; t0 += 16) {
    for (int64_t e = 0; e < padded; e += 32) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(xb + (t0 + i) * ldx + e);
      Transpose16(v);
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(x2 + (e / 2 + p) * ld2 + t0, v[p]);
    }
  }
  for (; t0 < m; ++t0) {
    for (int64_t q = 0; q < padded / 2; ++q) {
      x2[q * ld2 + t0] = xb[t0 * ldx + 2 * q] | uint32_t{xb[t0 * ldx + 2 * q + 1]} << 16;
    }
  }
}

void TileRowsHardware(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2,
                      int64_t m, int64_t n, float* y, int64_t ldy) {
  HardwareTiles u;
  TileRows(u, type, w, row_bytes, nr, x2, ld2, m, n, y, ldy);
}

void TileRowsEmulated(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2,
                      int64_t m, int64_t n, float* y, int64_t ldy) {
  EmulatedTiles u;
  TileRows(u, type, w, row_bytes, nr, x2, ld2, m, n, y, ldy);
}

}  // namespace

void FillBf16(KernelTable* t) {
  t->bf16_tile_rows = TileRowsHardware;
  t->bf16_pairs = Pairs;
  t->matmul_bf16_variant = "amx-bf16";
}

Bf16TileRowsFn Bf16TileRowsEmulated() { return TileRowsEmulated; }
Bf16PairsFn Bf16PairsAvx512() { return Pairs; }

}  // namespace infera::amx
