// The tiled attention chunk kernel (FlashChunkFn) in AVX-512: the same
// operations in the same order per row as FlashChunkGeneric, with the block's
// rows register-blocked against each tile's K/V.
//
// Per step of 64 positions (four groups of the transposed K layout when the
// KV blocks hold a multiple of 16 slots): scores of up to 6 rows at once,
// four vector loads of K per dimension shared by every row (one accumulator
// per row and group: the reference's single chain), so a row's 64 scores
// land in four registers; the online-softmax update of the 6 rows together,
// one row per lane for their maxima, corrections and sums (StepMaxRows,
// AddRowSums); then the values, 4 rows × 64 output elements at a time, one
// broadcast probability per row and position. While a step computes, its
// first row group prefetches the next step's K and V a line at a time
// (decode over a long context streams them from memory: 1.4× from
// prefetching alone).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/flash_slots512.h"
#include "kernels/cpu/avx512/softmax512.h"
#include "kernels/flash_generic.h"

namespace infera::avx512 {
namespace {

constexpr int kScoreRows = 6;  // rows per score block: 24 accumulators
constexpr int kValueRows = 4;  // rows per value block: 16 accumulators

inline __mmask16 FirstLanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// One step's K, kFlashStepTiles tiles transposed ([head_dim][16], f32 or
// int8; a zero tile for tiles no lane of the step reads), and the factor
// each lane's dot is multiplied by (scale; int8: ks_j * scale). Its V: row
// pointers (f32 or int8) and, for int8, each lane's scale.
struct Step {
  const float* kf[kFlashStepTiles] = {};
  const int8_t* k8[kFlashStepTiles] = {};
  __m512 kscale[kFlashStepTiles];
  const float* vf[kFlashStep];
  const int8_t* v8[kFlashStep];
  __m512 vscale[kFlashStepTiles];
};

// The next step's K tiles and V rows (flash_generic.h), prefetched a line at
// a time from inside this step's loops, so that the loads from memory overlap
// the arithmetic. Null: none.
using NextStep = FlashNextStep;

template <bool kQ8>
inline __m512 LoadK(const Step& t, int c, int d) {
  if constexpr (kQ8) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.k8[c] + d * 16))));
  } else {
    return _mm512_loadu_ps(t.kf[c] + d * 16);
  }
}

// s[r][c] = the scaled scores of rows q[0 .. kR) against tile c's 16 slots:
// one FMA chain per row and tile (4 K loads shared by kR broadcasts per d).
// Not inlined: inside the chunk function the compiler kept 8 of the 24
// accumulators of 6 rows on the stack (prefill blocks 1.19× without).
template <int kR, bool kQ8>
__attribute__((noinline)) void Scores(const float* const* q, const Step& t, int hd, const NextStep* next,
                                      __m512 (*s)[kFlashStepTiles]) {
  __m512 acc[kR][kFlashStepTiles];
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int d = 0; d < hd; ++d) {
    __m512 kv[kFlashStepTiles];
    for (int c = 0; c < kFlashStepTiles; ++c) kv[c] = LoadK<kQ8>(t, c, d);
    constexpr int kBytes = kQ8 ? 16 : 64;  // of one tile row
    if (next != nullptr && (d * kBytes) % 64 == 0) {
      for (int c = 0; c < kFlashStepTiles; ++c) _mm_prefetch(next->k[c] + d * kBytes, _MM_HINT_T0);
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 qd = _mm512_set1_ps(q[r][d]);
      for (int c = 0; c < kFlashStepTiles; ++c) acc[r][c] = _mm512_fmadd_ps(qd, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kFlashStepTiles; ++c) s[r][c] = _mm512_mul_ps(acc[r][c], t.kscale[c]);
  }
}

// o rows (kR of them) = o * corr, then += p_j * v_j for step lanes j in
// [j0, j1], in order, on kC 16-float chunks of each row from element d0; the
// last chunk takes the lanes in `tail`. int8: p already holds p_j * vs_j.
template <int kR, int kC, bool kQ8>
void ValuesChunks(float* const* orow, const float* corr, const float* p, const Step& t, int j0, int j1, int d0,
                  __mmask16 tail, int hd, const NextStep* next) {
  __m512 acc[kR][kC];
  for (int r = 0; r < kR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      acc[r][c4] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow[r] + d0 + 16 * c4), c);
    }
  }
  constexpr int kBytes = kQ8 ? 16 : 64;  // of one 16-element chunk
  for (int j = j0; j <= j1; ++j) {
    if (next != nullptr) {
      const char* row = next->v[j / kFlashTile] + (j % kFlashTile) * hd * (kBytes / 16);
      for (int c4 = 0; c4 < kC; c4 += 64 / kBytes) _mm_prefetch(row + (d0 + 16 * c4) * (kBytes / 16), _MM_HINT_T0);
    }
    __m512 v[kC];
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      if constexpr (kQ8) {
        v[c4] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, t.v8[j] + d0 + 16 * c4)));
      } else {
        v[c4] = _mm512_maskz_loadu_ps(m, t.vf[j] + d0 + 16 * c4);
      }
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r * kFlashStep + j]);
      for (int c4 = 0; c4 < kC; ++c4) acc[r][c4] = _mm512_fmadd_ps(pj, v[c4], acc[r][c4]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int c4 = 0; c4 < kC; ++c4) {
      const __mmask16 m = c4 == kC - 1 ? tail : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(orow[r] + d0 + 16 * c4, m, acc[r][c4]);
    }
  }
}

template <int kR, bool kQ8>
void Values(float* const* orow, const float* corr, const float* p, const Step& t, int j0, int j1, int hd,
            const NextStep* next) {
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nc = std::min(4, (hd - d0 + 15) / 16);
    const __mmask16 tail = FirstLanes(hd - d0 - 16 * (nc - 1));
    switch (nc) {
      case 1: ValuesChunks<kR, 1, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next); break;
      case 2: ValuesChunks<kR, 2, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next); break;
      case 3: ValuesChunks<kR, 3, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next); break;
      default: ValuesChunks<kR, 4, kQ8>(orow, corr, p, t, j0, j1, d0, tail, hd, next); break;
    }
  }
}

// Fills `t` for the step at t0 whose lanes [j0, j1] are read: K tiles in
// place or gathered into kbuf (FlashKTile), `zeros` [hd][16] for tiles with
// no read lane; unread lanes' V rows: any row, times p = 0. A whole group's
// tile takes its V rows, K tile and scales with vector operations.
template <bool kQ8>
void LoadStep(const FlashBlock& b, int32_t t0, int j0, int j1, float* kbuf, const float* zeros, float* lane_buf,
              Step* t) {
  const int hd = b.head_dim;
  const int32_t* slots = b.slots + t0;
  float* ks = lane_buf;
  float* vs = lane_buf + kFlashStep;
  const __m512 scale = _mm512_set1_ps(b.scale);
  for (int c = 0; c < kFlashStepTiles; ++c) {
    const int c0 = c * kFlashTile, a = std::max(j0, c0) - c0, z = std::min(j1, c0 + kFlashTile - 1) - c0;
    int32_t base = 0;
    if (WholeGroup(slots, c, j0, j1, &base)) {
      // Row pointers base + j * hd (bytes: elements times the element size).
      const int64_t elem = kQ8 ? 1 : sizeof(float);
      const char* row0 = kQ8 ? reinterpret_cast<const char*>(b.v8) : reinterpret_cast<const char*>(b.v);
      const int64_t r = hd * elem;
      const __m512i step = _mm512_set1_epi64(8 * r);
      const __m512i p = _mm512_add_epi64(_mm512_set1_epi64(reinterpret_cast<int64_t>(row0 + base * r)),
                                         _mm512_setr_epi64(0, r, 2 * r, 3 * r, 4 * r, 5 * r, 6 * r, 7 * r));
      void* dst = kQ8 ? static_cast<void*>(t->v8 + c0) : static_cast<void*>(t->vf + c0);
      _mm512_storeu_si512(dst, p);
      _mm512_storeu_si512(static_cast<char*>(dst) + 64, _mm512_add_epi64(p, step));
      const int64_t tile = FlashKIndex(base, 0, hd);
      if constexpr (kQ8) {
        t->kscale[c] = _mm512_mul_ps(_mm512_loadu_ps(b.ks + base), scale);
        t->vscale[c] = _mm512_loadu_ps(b.vs + base);
        t->k8[c] = b.k8 + tile;
      } else {
        t->kscale[c] = scale;
        t->kf[c] = b.k + tile;
      }
      continue;
    }
    for (int j = c0; j < c0 + kFlashTile; ++j) {
      const bool seen = j >= j0 && j <= j1;
      const int64_t slot = seen ? slots[j] : slots[j0];
      if constexpr (kQ8) {
        t->v8[j] = b.v8 + slot * hd;
        ks[j] = seen ? b.ks[slot] : 0.0f;
        vs[j] = seen ? b.vs[slot] : 0.0f;
      } else {
        t->vf[j] = b.v + slot * hd;
      }
    }
    float* buf = kbuf + int64_t(c) * kFlashTile * hd;
    if constexpr (kQ8) {
      t->kscale[c] = _mm512_mul_ps(_mm512_loadu_ps(ks + c0), scale);
      t->vscale[c] = _mm512_loadu_ps(vs + c0);
      t->k8[c] = a > z ? reinterpret_cast<const int8_t*>(zeros)
                       : FlashKTile(b.k8, slots + c0, a, z, hd, reinterpret_cast<int8_t*>(buf));
    } else {
      t->kscale[c] = scale;
      t->kf[c] = a > z ? zeros : FlashKTile(b.k, slots + c0, a, z, hd, buf);
    }
  }
}

template <typename Fn>
void ForRowGroups(int r0, int r1, int n, Fn&& fn) {
  for (int r = r0; r < r1; r += n) fn(r, std::min(n, r1 - r));
}

template <bool kQ8>
void FlashChunk(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  const int hd = b.head_dim, g = b.g;
  int ia = 0, ib = 0;
  FlashTokensOverlapping(b, lo, hi, &ia, &ib);
  if (ia >= ib) return;
  const int R = b.rows();
  float* S = scratch;                                    // [R][64] probabilities (int8: times vs)
  float* corr = S + int64_t(R) * kFlashStep;             // [R]
  float* lane_buf = corr + R;                            // [2][64] int8 K and V lane scales
  float* kbuf = lane_buf + 2 * kFlashStep;               // [4][hd][16] gathered K tiles
  float* zeros = kbuf + int64_t(kFlashStep) * hd;        // [hd][16] the K of unread tiles
  bool zeroed = false;
  FlashResetRows(ia * g, ib * g, hd, m, l, o);
  auto qrow = [&](int r) { return b.q + (r / g) * b.q_stride + (r % g) * hd; };
  const int32_t ulo = std::max(lo, b.first[ia]), uhi = std::min(hi, b.last[ib - 1]);
  int ta = ia, tb = ia;
  const int32_t block_end = b.last[b.nq - 1];
  Step t;
  NextStep next;
  for (int32_t t0 = ulo - ulo % kFlashStep; t0 <= uhi; t0 += kFlashStep) {
    // Tokens that see part of this step: those whose range ends at or after
    // t0 and starts at or before t0 + 63 (both bounds move forward).
    while (ta < ib && std::min(hi, b.last[ta]) < t0) ++ta;
    while (tb < ib && std::max(lo, b.first[tb]) <= t0 + kFlashStep - 1) ++tb;
    if (ta >= tb) continue;
    const int32_t plo = std::max(ulo, t0), phi = std::min(uhi, t0 + kFlashStep - 1);
    const int j0 = plo - t0, j1 = phi - t0;
    if (!zeroed && (j0 >= kFlashTile || j1 < kFlashStep - kFlashTile)) {
      std::fill(zeros, zeros + int64_t(kFlashTile) * hd, 0.0f);
      zeroed = true;
    }
    LoadStep<kQ8>(b, t0, j0, j1, kbuf, zeros, lane_buf, &t);
    // The next step's positions, also past this chunk: the next chunk of a
    // long context usually runs next on the same thread.
    const NextStep* step_pf = nullptr;  // for the step's first row group only
    if (t0 + kFlashStep <= block_end) {
      FindFlashNextStep<kQ8>(b, t0 + kFlashStep, block_end, &next);
      step_pf = &next;
    }
    const int r0 = ta * g, r1 = tb * g;
    // Scores and the online softmax.
    ForRowGroups(r0, r1, kScoreRows, [&](int rg, int nr) {
      const float* q[kScoreRows];
      for (int i = 0; i < nr; ++i) q[i] = qrow(rg + i);
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      __m512 sc[kScoreRows][kFlashStepTiles];
      switch (nr) {
        case 1: Scores<1, kQ8>(q, t, hd, pf, sc); break;
        case 2: Scores<2, kQ8>(q, t, hd, pf, sc); break;
        case 3: Scores<3, kQ8>(q, t, hd, pf, sc); break;
        case 4: Scores<4, kQ8>(q, t, hd, pf, sc); break;
        case 5: Scores<5, kQ8>(q, t, hd, pf, sc); break;
        default: Scores<6, kQ8>(q, t, hd, pf, sc); break;
      }
      // The rows' maxima and corrections as lanes of one vector each, then
      // each row's probabilities, then their sums (rows as lanes again).
      int32_t a[kScoreRows], z[kScoreRows];
      StepLanes(b, lo, hi, t0, rg, nr, a, z);
      const __m512 mx = StepMaxRows(sc, nr, a, z, b.softcap, m + rg, corr + rg);
      __m512 sums[kScoreRows];
      for (int k = 0; k < nr; ++k) {
        float* s = S + int64_t(rg + k) * kFlashStep;
        const __m512 mxv = LaneOf(mx, k);
        __m512 p[kFlashStepTiles];
        for (int c = 0; c < kFlashStepTiles; ++c) {
          p[c] = ExpNonPositive16(_mm512_sub_ps(sc[k][c], mxv));
          _mm512_storeu_ps(s + c * kFlashTile, kQ8 ? _mm512_mul_ps(p[c], t.vscale[c]) : p[c]);
        }
        sums[k] = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
      }
      AddRowSums(sums, nr, corr + rg, l + rg);
    });
    // Values.
    ForRowGroups(r0, r1, kValueRows, [&](int rg, int nr) {
      float* out[kValueRows];
      for (int i = 0; i < nr; ++i) out[i] = o + int64_t(rg + i) * hd;
      const float* p = S + int64_t(rg) * kFlashStep;
      const NextStep* pf = rg == r0 ? step_pf : nullptr;
      switch (nr) {
        case 1: Values<1, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf); break;
        case 2: Values<2, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf); break;
        case 3: Values<3, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf); break;
        default: Values<4, kQ8>(out, corr + rg, p, t, j0, j1, hd, pf); break;
      }
    });
  }
}

void FlashChunkAny(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o, float* scratch) {
  if (b.k8 != nullptr) return FlashChunk<true>(b, lo, hi, m, l, o, scratch);
  FlashChunk<false>(b, lo, hi, m, l, o, scratch);
}

}  // namespace

void FillFlash(KernelTable* t) {
  t->flash_chunk = FlashChunkAny;
  t->flash_merge = FlashMergeGeneric;  // inline FMAs in ExpNonPositive (no libm call)
  t->silu_mul = SiluMulGeneric;        // vectorized with this file's flags
  t->gelu_tanh_mul = GeluTanhMulGeneric;
  t->soft_cap = SoftCapGeneric;
  t->flash_variant = "avx512-tiled";
  // The bf16 form stays the AVX2 level's kernel where the CPU lacks
  // AVX512-BF16 (Ice Lake class; avx512bf16::Fill replaces it elsewhere):
  // the generic loops compiled with this file's flags ran 2.1-2.9 GFLOP/s
  // against its 15-26 (kernels_bench Attention_TiledBf16*, one thread).
}

}  // namespace infera::avx512
