// One table of CPU kernels, filled once at start-up for the best ISA the CPU
// supports (or a lower one on request). The scalar reference fills every
// entry; each ISA level overrides only what it speeds up. Every override is
// tested against the reference (tests/unit/kernels_test.cc).
//
// Numerics are defined by the scalar reference, and every ISA reproduces them
// bit for bit. A float dot product of length n is 16 "lanes" (lane l takes
// elements l, l+16, ...), each accumulated with fused multiply-adds in k
// order and summed by one fixed tree (Reduce16). So a token's output never
// depends on how many tokens, rows or threads share a call (batch
// invariance), nor on the ISA.
//
// Quantized weights: the activations are quantized once per matmul to 8-bit
// blocks of 32 (QuantActs), the weights are repacked at load (packed.h), and
// each output is an exact integer dot per k-block (AVX-512 VNNI vpdpbusd,
// AVX2 vpmaddubsw / vpmaddwd), accumulated in float across k-blocks in order
// (QGemmFn): again one fixed order per output, whatever M, ISA or threads.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/packed.h"
#include "tensor/dtype.h"

namespace infera {

// Elements per unpack unit; unpacked rows are padded with zeros to a multiple.
inline constexpr int64_t kQUnit = 256;

inline int64_t RoundUpToUnit(int64_t n) { return (n + kQUnit - 1) / kQUnit * kQUnit; }

// Float weights: y[t * ldy + r] = W[r, :] · x[t * ldx + :] for r < nr <= 4,
// t < nt <= 6; W rows are row_bytes apart.
using FloatTileFn = void (*)(const uint8_t* w, size_t row_bytes, int nr, const float* x, int64_t ldx,
                             int nt, int64_t n, float* y, int64_t ldy);
// The same with bf16 products (`--matmul-dtype bf16`): x holds the tokens'
// activations as bf16 bits (Bf16Round; rows ldx >= RoundUpToBf16Step(n)
// apart, zero past n), and y[t * ldy + r] is the defining bf16 dot of
// bf16_generic.h's arithmetic: 16 lanes, lane l takes, per step i of 32
// elements, the pair (32 i + 2 l, 32 i + 2 l + 1) as one VDPBF16PS lane,
// acc = DotBf16Pair(acc, x[e], w[e], x[e + 1], w[e + 1]) with w rounded to
// bf16 (elements past n: 0), then Reduce16.
using Bf16TileFn = void (*)(const uint8_t* w, size_t row_bytes, int nr, const uint16_t* x, int64_t ldx, int nt,
                            int64_t n, float* y, int64_t ldy);
// The tile form of the bf16 dot, a tile unit's (AMX-BF16 TDPBF16PS as the
// instruction's pseudo-code defines it): one f32 sum per token and row, in
// element order, acc = FlushDenormal(fma(x[e], w[e], acc)) from acc = +0 for
// e < RoundUpToBf16Step(n) (w rounded to bf16; both zero past n). Not the
// 16-lane form above (a tile sums a whole step of 32 into one element), so
// its results differ from it within f32 rounding; batch invariance holds
// because every token count runs it (KernelTable::bf16_tile_rows).
// y[t * ldy + r] for nr <= kBf16TileRows rows of type `type` (row_bytes
// apart) and every token t < m. The activations come as bf16 pairs,
// transposed once per matmul (Bf16PairsFn): x2[q * ld2 + t] (ld2 >= m) holds
// elements 2 q (low half) and 2 q + 1 of token t, for q < RoundUpToBf16Step(n) / 2.
using Bf16TileRowsFn = void (*)(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2,
                                int64_t m, int64_t n, float* y, int64_t ldy);
inline constexpr int kBf16TileRows = 32;
// xb [m] rows of ldx bf16 (zero past n, ldx >= RoundUpToBf16Step(n)) -> x2
// as above.
using Bf16PairsFn = void (*)(const uint16_t* xb, int64_t ldx, int64_t m, int64_t n, uint32_t* x2, int64_t ld2);
inline constexpr int64_t kBf16Step = 32;
inline int64_t RoundUpToBf16Step(int64_t n) { return (n + kBf16Step - 1) / kBf16Step * kBf16Step; }
// x [n] -> bf16 bits y [n] (Bf16Round, VCVTNEPS2BF16).
using RoundBf16Fn = void (*)(const float* x, int64_t n, uint16_t* y);
// A row of n F32 / F16 / BF16 weights -> bf16 bits y [n], each Bf16Round of
// its f32 value (what the bf16 tiles do in registers).
using RowToBf16Fn = void (*)(DType t, const uint8_t* row, int64_t n, uint16_t* y);
// One quantized row of n elements -> u [n_pad], s16, m16 [n_pad / 16] (zeros
// in the padding); weight = s16 * (u - 2^shift) + m16 per 16-group.
using UnpackRowFn = void (*)(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16);
// Packed quantized rows of one 16-row group · tokens t0 .. t0+nt-1 (nt <= 4):
// y[i * 16 + r] for token t0+i and row r of the group. For each row and
// token, in k-block order: isum = bias + sum(u * q) (exact integer),
// acc = fma(float(isum), s * da, acc), and with mins macc = fma(m, dsum, macc);
// the result is acc + macc.
using QGemmFn = void (*)(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y);

// The most tokens one qgemm_row call takes.
inline constexpr int kMaxRowTileTokens = 8;
// The most tokens one qgemm_tile16 call takes.
inline constexpr int kQGemmTileTokens = 16;

// A group of a sparse layout (sparse24 or sparse_mask) -> the same group in
// the dense layout it stands for (`dense`: PackedMatrix::DenseGroup of
// w.DenseType() and the same n_in): exactly the bytes Pack gives the dense matrix. Prefill expands each
// group once per block of tokens and runs the dense kernel on it.
using ExpandSparseFn = void (*)(const PackedMatrix& w, int64_t group, PackedMatrix* dense);

// Slots per group of the K layout below (and the vector width of one K
// load in the tiled kernel).
inline constexpr int kFlashTile = 16;
// Positions per online-softmax step of the tiled kernel (kFlashStepTiles
// K groups); steps start at multiples of it. One running-max / rescale
// update per row and step, so its cost is shared by 64 positions.
inline constexpr int kFlashStepTiles = 4;
inline constexpr int kFlashStep = kFlashStepTiles * kFlashTile;

// The KV cache layout the tiled kernel reads, per KV head: K in groups of
// kFlashTile slots, each group transposed ([head_dim][kFlashTile]: one
// vector load gives dimension d of 16 consecutive slots), and V row-major
// ([slot][head_dim]). Element d of slot s of K:
inline int64_t FlashKIndex(int64_t slot, int d, int head_dim) {
  return ((slot / kFlashTile) * head_dim + d) * kFlashTile + slot % kFlashTile;
}

// The bf16 cache layouts (`--kv-cache-type bf16`), per KV head, in bf16
// elements: the pair layouts the bf16 kernel reads (flash_bf16_generic.h).
// K: groups of 16 slots, each [head_dim / 2 (rounded up)][16][2]: a 64-byte
// vector holds dimensions (d, d + 1) of 16 consecutive slots. V: pairs of
// slots (2s, 2s + 1), each [FlashV16Width][2]: a 64-byte vector holds 16
// output elements of both slots. Padding elements stay 0.
inline int FlashK16Pairs(int head_dim) { return (head_dim + 1) / 2; }
inline int FlashV16Width(int head_dim) { return (head_dim + 15) / 16 * 16; }
// Elements per slot (K and V each): at least head_dim.
inline int64_t FlashHead16Elems(int head_dim) {
  return std::max<int64_t>(2 * FlashK16Pairs(head_dim), FlashV16Width(head_dim));
}
inline int64_t FlashK16Index(int64_t slot, int d, int head_dim) {
  return (((slot / kFlashTile) * FlashK16Pairs(head_dim) + d / 2) * kFlashTile + slot % kFlashTile) * 2 + d % 2;
}
inline int64_t FlashV16Index(int64_t slot, int d, int head_dim) {
  return ((slot / 2) * FlashV16Width(head_dim) + d) * 2 + slot % 2;
}

// A block of query tokens of one sequence whose g query heads share one KV
// head, for the tiled attention kernel. Row r = i * g + h (token i, head h)
// reads its query at q + i * q_stride + h * head_dim [head_dim]. Token i sees
// positions [first[i], last[i]]; both are nondecreasing in i (causal, with an
// optional sliding window). Position p's K/V are those of slot slots[p] in
// this head's cache (FlashKIndex layout): f32 k/v (k8 null), or int8 k8/v8
// with one scale per slot at ks[slot] / vs[slot] (x = scale * q). Borrowed
// pointers, valid for the call.
struct FlashBlock {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int nq = 0;
  int g = 0;
  int head_dim = 0;
  const int32_t* first = nullptr;
  const int32_t* last = nullptr;
  const int32_t* slots = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const int8_t* k8 = nullptr;
  const int8_t* v8 = nullptr;
  const float* ks = nullptr;
  const float* vs = nullptr;
  const uint16_t* k16 = nullptr;  // bf16 cache: FlashK16Index / FlashV16Index layouts
  const uint16_t* v16 = nullptr;
  float scale = 0;    // multiplies q·k
  float softcap = 0;  // > 0: scores become softcap * tanh(score / softcap)
  int rows() const { return nq * g; }
};

// The tokens [*ia, *ib) of b whose ranges overlap positions [lo, hi] (a
// contiguous run, as first and last are nondecreasing).
inline void FlashTokensOverlapping(const FlashBlock& b, int32_t lo, int32_t hi, int* ia, int* ib) {
  int i = 0;
  while (i < b.nq && b.last[i] < lo) ++i;
  int j = i;
  while (j < b.nq && b.first[j] <= hi) ++j;
  *ia = i;
  *ib = j;
}

// The attention state of every row of the tokens overlapping [lo, hi], over
// the positions of that range each sees, starting afresh: running max m [R],
// sum l [R] and unnormalized output o [R, head_dim] (R = b.rows(); other rows
// untouched). Per row and step of kFlashStep positions (steps start at
// multiples of kFlashStep):
//   dot(q, k) = one chain of fused multiply-adds q[d] * k[d] in increasing
//     d, from 0;
//   int8 caches: the query is quantized as the cache's rows are, in blocks
//     of kFlashQBlock dimensions (the last one shorter where head_dim is
//     not a multiple), each with its own scale (QuantizeFlashQuery: qs_b,
//     q8), as llama.cpp does for a q8_0 K cache; per block an exact integer
//     dot (|sum| < 2^24: any order, in floats or integers, gives the same
//     value), and dot(q, k) = one chain fma(qs_b, float(sum_b), dot) over
//     the blocks in order, from 0;
//   s = SoftCap(dot(q, k) * scale) (int8: dot(q, k) * (ks * scale));
//     positions outside the row's range -inf;
//   mx = max(m, s), corr = ExpNonPositive(m - mx), p = ExpNonPositive(s - mx),
//   l = l * corr + Reduce64(p), o *= corr, then over the row's positions j
//   in order o = fma(p_j, v_j, o) (int8: fma(p_j * vs_j, float(v8_j), o));
//   m = mx.
// The bf16 form (KernelTable::flash_chunk_bf16, f32 caches only): q, k, v
// and p are rounded to bf16 (bf16_generic.h's Bf16Round) and their products
// summed as VDPBF16PS lanes (DotBf16Pair):
//   dot(q, k) = from 0, over d = 0, 2, 4, ...: DotBf16Pair(dot, q[d], k[d],
//     q[d + 1], k[d + 1]) (element head_dim of an odd head: 0);
//   s, mx, corr as above; p = bf16(ExpNonPositive(s - mx)),
//   l = l * corr + Reduce64(p), o *= corr, then over the pairs of positions
//   (j, j + 1), j even, covering the row's positions of the step, in order,
//   o = DotBf16Pair(o, p_j, v_j, p_j+1, v_j+1) (a position the row does not
//   see: p = 0 and v any finite value, which can change only the sign of a
//   zero in the state, and outputs' zeros come out as +0).
// Scratch: FlashChunkScratchFloats(R, head_dim) floats.
using FlashChunkFn = void (*)(const FlashBlock& b, int32_t lo, int32_t hi, float* m, float* l, float* o,
                              float* scratch);
// Left-folds one chunk's state (mc, lc, oc) into the running state (m, l,
// o) for every row of the tokens overlapping [lo, hi]: a row with l = 0
// (before its first chunk) takes the chunk's state; otherwise
// mx = max(m, mc), a = ExpNonPositive(m - mx), e = ExpNonPositive(mc - mx),
// l = l * a + lc * e, o = o * a + oc * e (no fused multiply-add), m = mx.
using FlashMergeFn = void (*)(const FlashBlock& b, int32_t lo, int32_t hi, const float* mc, const float* lc,
                              const float* oc, float* m, float* l, float* o);
// Dimensions per scale of an int8 cache's quantized query (q8_0's block).
inline constexpr int kFlashQBlock = 32;
inline int FlashQBlocks(int head_dim) { return (head_dim + kFlashQBlock - 1) / kFlashQBlock; }
// Scratch floats of a chunk kernel: its own working set, then from
// FlashChunkQueryOffset an int8 cache's quantized queries (rows x
// FlashQueryFloats: the query in float or int8, and per block a scale and
// an integer sum).
inline size_t FlashChunkQueryOffset(int rows, int head_dim) {
  return size_t(rows) * (kFlashStep + 2 + head_dim / 2) + size_t(4 * kFlashStep + kFlashTile) * (head_dim + 16);
}
inline size_t FlashQueryFloats(int head_dim) { return size_t(head_dim) + 2 * FlashQBlocks(head_dim); }
inline size_t FlashChunkScratchFloats(int rows, int head_dim) {
  return FlashChunkQueryOffset(rows, head_dim) + size_t(rows) * FlashQueryFloats(head_dim);
}

struct KernelTable {
  CpuIsa isa = CpuIsa::kScalar;
  const char* qgemm_variant = "scalar";
  FloatTileFn tile_f32 = nullptr;
  FloatTileFn tile_f16 = nullptr;
  FloatTileFn tile_bf16 = nullptr;
  QGemmFn qgemm = nullptr;
  // The same contract and bits as qgemm for up to kQGemmTileTokens tokens
  // per call (nt <= 16), dense layouts only: prefill's blocks of tokens on a
  // tile unit (AMX-INT8). Null where the CPU has none.
  QGemmFn qgemm_tile16 = nullptr;
  const char* qgemm_tile16_variant = "none";
  // The same for the 2:4 sparse layout (PackFormat::sparse24): identical
  // results to qgemm on the dense Q8_0 packing of the same weights.
  QGemmFn qgemm_sparse24 = nullptr;
  const char* qgemm_sparse24_variant = "scalar";
  // And for the sparse-mask layout (PackFormat::sparse_mask).
  QGemmFn qgemm_sparse_mask = nullptr;
  const char* qgemm_sparse_mask_variant = "scalar";
  // Row-scaled packed weights (PackFormat::row_scale, W8A8) against
  // per-token activations (one k-block per token): per row and token
  // isum = bias + sum over the whole row of u * q (exact int32), and
  // y = float(isum) * (s * da) with s the row's scale (that of k-block 0).
  // Takes up to kMaxRowTileTokens tokens per call (nt <= 8).
  QGemmFn qgemm_row = nullptr;
  const char* qgemm_row_variant = "scalar";
  QuantizeTokenRowFn quantize_token_row = nullptr;
  ExpandSparseFn expand_sparse24 = nullptr;
  ExpandSparseFn expand_sparse_mask = nullptr;
  // Activation quantization for qgemm, one token (packed.h).
  QuantizeTokenFn quantize_token = nullptr;
  // Plain f32 dot product (attention scores).
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // y += a * x (attention value accumulation).
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n) = nullptr;
  // One query head over its cached K/V (see attend_generic.h for the
  // definition): q [head_dim] -> out [head_dim], positions [first, last],
  // row of position p at base + slots[p] * row_stride; scores [last + 1].
  // Scores are q·k * scale, then softcap * tanh(score / softcap) when
  // softcap > 0 (Gemma 2's attention soft-capping).
  void (*attend_head)(const float* q, const float* k_base, const float* v_base, int64_t row_stride, int head_dim,
                      float scale, float softcap, const int32_t* slots, int32_t first, int32_t last, float* scores,
                      float* out) = nullptr;
  // Tiled online-softmax attention of a block of query tokens over one
  // chunk of positions (FlashChunkFn; flash.h drives it).
  FlashChunkFn flash_chunk = nullptr;
  FlashMergeFn flash_merge = nullptr;
  // The same with bf16 products (FlashChunkFn's bf16 form; f32 caches).
  FlashChunkFn flash_chunk_bf16 = nullptr;
  const char* flash_bf16_variant = "scalar";
  // Attention over f32 caches runs flash_chunk_bf16 (`--attn-dtype bf16`;
  // int8 caches keep flash_chunk). Set once at start-up.
  bool attn_bf16 = false;
  // g[i] = silu(g[i]) * u[i] (exp_generic.h's SiluMulGeneric, the same bits
  // as SiluMul below on every ISA).
  void (*silu_mul)(float* g, const float* u, int64_t n) = nullptr;
  // g[i] = gelu_tanh(g[i]) * u[i] (exp_generic.h's GeluTanhMulGeneric, the
  // same bits as GeluTanhMul below on every ISA).
  void (*gelu_tanh_mul)(float* g, const float* u, int64_t n) = nullptr;
  // x[i] = cap * tanh(x[i] / cap) (exp_generic.h's SoftCapGeneric; the same
  // bits as SoftCapInPlace below on every ISA).
  void (*soft_cap)(float* x, int64_t n, float cap) = nullptr;
  const char* flash_variant = "scalar";

  // Float-weight matmuls with bf16 products (Bf16TileFn), used instead of
  // tile_* when matmul_bf16 is set (`--matmul-dtype bf16`, once at start-up).
  Bf16TileFn bf16_tile_f32 = nullptr;
  Bf16TileFn bf16_tile_f16 = nullptr;
  Bf16TileFn bf16_tile_bf16 = nullptr;
  RoundBf16Fn round_bf16 = nullptr;
  RowToBf16Fn row_to_bf16 = nullptr;
  const char* matmul_bf16_variant = "scalar";
  // Where a tile unit has bf16 (AMX-BF16): float matmuls with bf16 products
  // run its tile form (Bf16TileRowsFn) for every token count instead of
  // bf16_tile_*, matmul_bf16_variant then naming it. Null elsewhere.
  Bf16TileRowsFn bf16_tile_rows = nullptr;
  Bf16PairsFn bf16_pairs = nullptr;
  bool matmul_bf16 = false;
  // Ops that stream fewer bytes than this (a matmul's weights x tokens,
  // attention's K/V rows x query tokens, a per-token loop's activations) run
  // on the calling thread instead of being split over the pool. 0 (the
  // default): every op splits. The model runner raises it for models small
  // enough to run from cache (DecoderRunner), where handing pieces to another
  // core costs more than it saves; the results are the same either way.
  int64_t min_split_bytes = 0;
  // Whether an op of `bytes` should be split over a pool of n_threads.
  bool ShouldSplit(int n_threads, int64_t bytes) const { return n_threads > 1 && bytes >= min_split_bytes; }

  FloatTileFn FloatTileFor(DType t) const;
  Bf16TileFn Bf16TileFor(DType t) const;
};

// Fills the table for `isa` (clamped to what `DetectCpuFeatures` reports:
// its MaxIsa).
KernelTable MakeKernelTable(CpuIsa isa);
KernelTable MakeBestKernelTable();

struct OutlierColumns;

// A weight matrix W [n_out, n_in] of any supported type (rows contiguous).
struct WeightMatrix {
  // (data is null when only the packed copy exists: a split model's
  // column-sliced quantized matrices.)
  DType type = DType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // For quantized types: the packed copy the kernels read (owned by the
  // model). Null: Matmul packs on the fly (tests, tools; slow).
  const PackedMatrix* packed = nullptr;
  // W8A8 with LLM.int8()-style outlier columns (owned by the model): null
  // for every other matrix.
  const OutlierColumns* outliers = nullptr;
};

// LLM.int8() (Dettmers et al., 2022)-style decomposition of a W8A8 matrix:
// the input columns `cols` (sorted, distinct; k of them) run in float
// against `dense` [n_out, k] (F16), the others in int8 (the int8 matrix holds
// zeros in `cols`), so the per-token activation scale is set by the ordinary
// channels: y = Q8(x with cols zeroed) · W8^T + x[:, cols] · dense^T.
struct OutlierColumns {
  std::vector<int32_t> cols;
  WeightMatrix dense;
};

// y [m, n_out] = x [m, n_in] · W^T, split over output rows across the pool.
// Each thread takes a contiguous range of rows (multiples of 16: no two
// threads write one cache line). Float weights: it walks them in L2-sized
// blocks of rows, each read by every token tile in turn. Quantized: it walks
// tokens in L2-sized blocks, each weight tile reused by every token of one.
// Uses per-thread scratch that grows once; no allocation in steady state.
void Matmul(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
            float* y);

// Several matrices with the same input, y_i [m, n_out_i] = x [m, n_in] ·
// W_i^T, as one parallel op (Q/K/V, gate/up; matrices with outlier columns
// one after another): the pool deals the rows of all of them at once, so the threads wait for each other once instead of once
// per matrix, and activations are quantized once per distinct format. Each
// y_i is computed exactly as Matmul computes it.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;
};
constexpr int kMaxMatmulTargets = 4;
void MatmulMany(const KernelTable& k, ThreadPool& pool, const MatmulTarget* targets, int n, const float* x,
                int64_t m);

// The sum of 16 lanes in the fixed order every kernel uses.
inline float Reduce16(const float* v) {
  float h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
  return (q[0] + q[2]) + (q[1] + q[3]);
}
// The sum of 64 lanes: (v_i + v_i+16) + (v_i+32 + v_i+48) lane-wise, then
// Reduce16.
inline float Reduce64(const float* v) {
  float t[16];
  for (int i = 0; i < 16; ++i) t[i] = (v[i] + v[i + 16]) + (v[i + 32] + v[i + 48]);
  return Reduce16(t);
}

// Element-wise ops (single-threaded, called per row).
// y[i] = x[i] / rms(x) * w[i]; accumulates in double.
void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);
// g[i] = silu(g[i]) * u[i] (the portable reference of KernelTable::silu_mul)
void SiluMul(float* g, const float* u, int64_t n);
// g[i] = gelu(g[i]) * u[i] with GELU's tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma's gelu_pytorch_tanh;
// the portable reference of KernelTable::gelu_tanh_mul).
void GeluTanhMul(float* g, const float* u, int64_t n);
// x[i] = cap * tanh(x[i] / cap) (the portable reference of KernelTable::soft_cap).
void SoftCapInPlace(float* x, int64_t n, float cap);
// In-place softmax over x[0, n).
void Softmax(float* x, int64_t n);

}  // namespace infera
