// Quantized weights repacked at load into the row-interleaved layout the
// integer kernels stream: one 64-byte vector holds 4 consecutive elements of
// each of 16 rows, so a vpdpbusd computes 16 output rows at once against 4
// broadcast activation bytes and each weight byte is read once per token
// tile. The layout is defined here (portable), the same for every ISA.
//
// Every quantized GGUF type maps onto: weight = s * (u - 2^shift) + m with u
// an unsigned 2-, 4-, 5-, 6- or 8-bit integer, and s, m one float each per row
// and k-block of `block` (16 or 32) elements (m = 0 unless has_min).
//
// Layout: rows in groups of 16 (zero rows pad the last group); per group,
// its n_in / block k-blocks in order, in units of one k-block (quants, then
// scales) or, for f16 scales without mins, two (quants, quants, scales,
// scales), so that every unit and every quant chunk is 64-byte aligned and a
// group is one sequential stream. Per k-block:
//   quants  block * 16 * bits / 8 bytes, as 64-byte chunks; chunk c holds
//           4 elements of each row (row r at bytes 4r .. 4r+3):
//             8-bit: elements 4c .. 4c+3 of the block
//             2-bit (Q2_K, blocks of 16: one chunk): byte 4r + j holds, at
//                    bits [2v, 2v + 2), element 4v + j
//             3-bit (Q3_K, blocks of 16: 96 bytes, so every other block's
//                    chunk is only 32-byte aligned): the low 2 bits as 2-bit,
//                    then 32 bytes of high bits: byte 4 (r % 8) + j holds
//                    at bit v (rows 0-7) or 4 + v (rows 8-15) that of
//                    element 4v + j
//             4-bit: low nibbles elements 4c .. 4c+3, high nibbles elements
//                    block/2 + 4c .. block/2 + 4c + 3
//             IQ4_NL (lut): the 4-bit codes as 4-bit; u = kIq4NlU[code]
//             5-, 6-bit (Q5_*, Q6_K): the low 4 bits of u as 4-bit, then
//                    one 64-byte chunk of the high bits (h = bits - 4 of
//                    each): byte 4r + j holds, at bits [h v, h v + h), those
//                    of element 4v + j (v < block / 4: 8 / h vectors)
//   scales  s [16], one per row, then m [16] (only if has_min)
// s and m are f16 where they are the file's own f16 values (the legacy types:
// exact, and the packed matrix is no larger than the file's blocks); factored
// as the file stores them for Q4_K / Q5_K (units of 8 k-blocks: their quants,
// then sc [16] u8 and mn [16] u8 per k-block, then d [16] and dmin [16] f16)
// and Q6_K (units of 16 k-blocks: quants, sc [16] i8 per k-block, d [16] f16
// and 32 bytes of padding) and Q2_K (units of 16 k-blocks: quants, then per
// k-block the file's scale bytes sc | mn << 4 [16], then d [16] and dmin [16]
// f16: 2.625 bits per weight, the file's size), IQ4_XS and IQ3_S (units of 8
// k-blocks: quants, the int8 sub-scale [16] per k-block (ls - 32; 1 + 2 sc),
// d [16] f16 and 32 bytes of padding; IQ2_XS the same in units of 16
// k-blocks of 16, its sub-scale 1 + 2 sc and s = d * (1 + 2 sc) * 0.125:
// 4.625 bits per weight, the file 2.3125) and Q3_K (units of 16
// k-blocks: quants, then per k-block the 6-bit sub-scales sc (12 bytes: byte
// r % 8 holds sc & 15 of row r in its low (r < 8) or high nibble, byte
// 8 + r / 4 holds sc >> 4 at bits [2 (r % 4), +2); s = d * (sc - 32)), then
// d [16] f16 and 32 bytes of padding: 3.5 bits per weight, the file 3.44);
// else f32 (no GGUF type is packed so since IQ2_XS was factored).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace infera {

// IQ4_NL's 16 non-linear values (tensor/quant_blocks.h kIq4nlValues) as the
// packed u: value + 128, with shift 7.
alignas(16) inline constexpr uint8_t kIq4NlU[16] = {1, 24, 45, 63, 79, 93, 106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};
// IQ3_S's 16 signed grid values -15, -13, ..., -1, 1, ..., 15 as the packed u
// (value + 128).
alignas(16) inline constexpr uint8_t kIq3sU[16] = {113, 115, 117, 119, 121, 123, 125, 127,
                                                   129, 131, 133, 135, 137, 139, 141, 143};
// IQ2_XS's six signed grid values -43, -25, -8, 8, 25, 43 as the packed u
// (value + 128; codes 6..15 unused, u 128).
alignas(16) inline constexpr uint8_t kIq2xsU[16] = {85, 103, 120, 136, 153, 171, 128, 128,
                                                    128, 128, 128, 128, 128, 128, 128, 128};

struct PackFormat {
  bool supported = false;
  int bits = 8;          // 2, 4, 5, 6 or 8
  int block = 32;        // 16 or 32 elements per scale
  bool has_min = false;
  int shift = -1;        // weight offset 2^shift; -1: none
  bool f16_scales = false;  // s, m stored as f16 (else f32)
  // Q4_K / Q5_K: s and m stored as the file has them, d and dmin (f16) per
  // super-block of 8 k-blocks and a 6-bit sub-scale / sub-min per k-block:
  // s = d * sc, m = -(dmin * mn), the unpacker's own f32 arithmetic. Q6_K
  // (no mins): d per super-block of 16 k-blocks, sc a signed byte. Q2_K
  // (2-bit): d and dmin per super-block of 16 k-blocks, sc and mn the two
  // nibbles of one byte (as the file has them).
  bool k_factored = false;
  // IQ4_NL, IQ4_XS, IQ3_S, IQ2_XS: the 4-bit values are codes, u = lut_u[code] (a
  // table lookup in the kernels: vpshufb), so their weights stay 4-bit.
  bool lut = false;
  // 2:4 sparse 8-bit (Q8_0 rows with at most two nonzeros per 4-group, or
  // Q8_0_S24): per k-block of 32, four windows of 8 elements, each one
  // 64-byte chunk of values (row r at bytes 4r .. 4r+3: the two kept signed
  // quants of elements 0..3 of the window, then those of 4..7) and, after
  // the four chunks, 64 bytes of codes (row r's byte 4r + v: c0 | c1 << 3
  // for window v, the kept pair of each half as an index into kPairs24;
  // rows as dwords, so a kernel loads every window's codes at once). u = q + 128 as
  // for Q8_0 (shift 7); the elements not kept have u = 128. Sized as a 5-bit
  // format (320 bytes of quants per block), f16 scales.
  // With 4-bit values (Q4_0 rows with at most two nonzeros per 4-group, or
  // Q4_0_S24; shift 3): the same windows, their values as nibbles u ^ 8 —
  // window v in the 64-byte chunk v % 2, low nibbles for v < 2, else high
  // nibbles — then the same 64 bytes of codes at 128; u = q + 8
  // as for Q4_0, the elements not kept u = 8. Sized as a 3-bit format (192
  // bytes per block: 3.5 bits per weight with the f16 scales, the file's).
  bool sparse24 = false;
  // Unstructured sparse 8-bit (Q8_0 with many zeros): blocks of variable
  // size, walked in order (PackedMatrix::Group): per k-block of 32, 8 u64
  // masks (bit i of mask c: byte i of Q8_0's dense vector c — row i / 4,
  // element 4c + i % 4 — is nonzero), the 16 f16 scales, then the nonzero
  // signed quants of vectors 0..7 in bit order. u = q + 128 (shift 7).
  bool sparse_mask = false;
  // W8A8: Q8_0's layout (u = q + 128, f16 scales per k-block, all equal
  // within a row), run with one scale per row and per token: the whole row's
  // integer dot in int32 (at most kW8A8MaxRow elements), then one multiply
  // (KernelTable::qgemm_row). Activations are quantized per token
  // (QuantizeTokenRowFn), not per 32-block.
  bool row_scale = false;
  // With lut: the code -> u table (16 entries, 16-byte aligned).
  const uint8_t* lut_u = kIq4NlU;
};

// How Pack lays out a Q8_0 matrix: dense, 2:4 (every 4-group has at most
// two nonzeros) or by masks (any zeros).
enum class SparseLayout { kDense, k24, kMask };

// The bits of a sparse24 format's kept values: 8 (Q8_0) or 4 (Q4_0).
inline int Sparse24ValueBits(const PackFormat& f) { return f.shift == 7 ? 8 : 4; }
// Where a sparse24 block's pair codes start: after its 16 rows x 16 kept values.
inline int Sparse24CodesOffset(const PackFormat& f) { return 32 * Sparse24ValueBits(f); }

// The six position pairs a 2:4 group can keep, in code order.
inline constexpr uint8_t kPairs24[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
PackFormat GetPackFormat(DType t);

struct AlignedFree {
  void operator()(uint8_t* p) const;
};

class PackedMatrix {
 public:
  static constexpr int kRows = 16;

  DType type() const { return type_; }
  const PackFormat& format() const { return fmt_; }
  int64_t n_in() const { return n_in_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_groups() const { return (n_out_ + kRows - 1) / kRows; }
  int64_t n_blocks() const { return n_in_ / fmt_.block; }
  size_t quant_bytes() const { return static_cast<size_t>(fmt_.block) * kRows * fmt_.bits / 8; }
  // Bytes of s (or m) of one k-block.
  size_t scale_bytes() const {
    return static_cast<size_t>(fmt_.k_factored ? 1 : fmt_.f16_scales ? 2 : 4) * kRows;
  }
  // Q2_K's sub-scale and sub-min share a byte; Q3_K's 6-bit sub-scales take
  // 12 bytes per k-block.
  size_t scale_stride() const {
    return fmt_.k_factored && fmt_.bits == 3 ? 12 : scale_bytes() * (fmt_.has_min && !nibble_scales() ? 2 : 1);
  }
  bool nibble_scales() const { return fmt_.k_factored && fmt_.bits == 2; }
  // IQ2_XS: s = d * sc * 0.125 (sc = 1 + 2 * the file's 4-bit scale).
  bool eighth_scales() const { return fmt_.k_factored && fmt_.lut && fmt_.block == 16; }
  // k-blocks per unit (log2): 8 for factored scales (a super-block); 2 when
  // one block's scales alone would leave the next block's quants off 64-byte
  // alignment (f16 s without m: 32 bytes); else 1.
  int unit_shift() const {
    return fmt_.k_factored ? (fmt_.block == 16 ? 4 : 3) : fmt_.f16_scales && !fmt_.has_min ? 1 : 0;
  }
  size_t unit_bytes() const {
    return (size_t{1} << unit_shift()) * (quant_bytes() + scale_stride()) + (fmt_.k_factored ? 4 * kRows : 0);
  }
  int64_t n_units() const { return (n_blocks() + (1 << unit_shift()) - 1) >> unit_shift(); }
  size_t group_bytes() const { return static_cast<size_t>(n_units()) * unit_bytes(); }
  size_t bytes() const {
    return fmt_.sparse_mask ? mask_bytes_ : static_cast<size_t>(n_groups()) * group_bytes();
  }
  // The quants of k-block b of a group (64-byte aligned).
  const uint8_t* Block(int64_t group, int64_t b) const {
    return Unit(group, b) + static_cast<size_t>(b & ((1 << unit_shift()) - 1)) * quant_bytes();
  }
  // Its scales: s [16] then, with mins, m [16].
  const uint8_t* Scales(int64_t group, int64_t b) const {
    return Unit(group, b) + (quant_bytes() << unit_shift()) +
           static_cast<size_t>(b & ((1 << unit_shift()) - 1)) * scale_stride();
  }

  // W [n_out, n_in] of a quantized type, rows row_bytes apart -> packed.
  // Single-threaded; call from several threads on disjoint matrices.
  // sparse24: pack Q8_0 / Q8_0_S24 (Q4_0 / Q4_0_S24) in the 2:4 sparse
  // layout (Q8_0 or Q4_0 rows must be 2:4, IsSparse24); kDense packs
  // Q8_0_S24 as dense Q8_0 and Q4_0_S24 as dense Q4_0.
  static PackedMatrix Pack(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out,
                           SparseLayout layout = SparseLayout::kDense);
  // Whether every block of W (Q8_0, Q8_0_S24, Q4_0 or Q4_0_S24) is 2:4 sparse.
  static bool IsSparse24(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out);
  // The fraction of zero quants of a Q8_0 or Q8_0_S48 matrix (0 for other types).
  static double ZeroFraction(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out);
  // Sparse-mask layout: the start of a group's blocks.
  const uint8_t* Group(int64_t group) const { return data_.get() + group_offset_[group]; }
  // Sparse-mask layout: the dense u [16][32] and scales [16] of the k-block
  // at p; returns the next block.
  static const uint8_t* ExpandMaskBlock(const uint8_t* p, uint8_t (*u)[32], float* s);
  // One 16-row group of dense t (Q8_0 or Q4_0) layout for rows of n_in
  // elements: scratch that a sparse group is expanded into (ExpandSparseFn).
  static PackedMatrix DenseGroup(DType t, int64_t n_in);
  // The dense type a sparse layout stands for: Q4_0 for 4-bit 2:4, else Q8_0.
  DType DenseType() const { return fmt_.sparse24 && Sparse24ValueBits(fmt_) == 4 ? DType::kQ4_0 : DType::kQ8_0; }
  uint8_t* MutableBlock(int64_t b) { return const_cast<uint8_t*>(Block(0, b)); }
  uint8_t* MutableScales(int64_t b) { return const_cast<uint8_t*>(Scales(0, b)); }
  // Sparse-mask layout: takes the groups' bytes (in order) as the data.
  PackedMatrix AdoptGroups(const std::vector<std::vector<uint8_t>>& groups);

  // Factored scales: d [16] then dmin [16] (f16) of k-block b's unit.
  const uint8_t* SuperScales(int64_t group, int64_t b) const {
    return Unit(group, b) + ((quant_bytes() + scale_stride()) << unit_shift());
  }
  // The scale s and min m of row r of a group in k-block b.
  float Scale(int64_t group, int64_t b, int r) const;
  float Min(int64_t group, int64_t b, int r) const;

  // The quant u of (row r of the group, element e of the block).
  static int Quant(const PackFormat& f, const uint8_t* block, int r, int e) {
    if (f.sparse24) {
      const int v = e / 8, half = (e % 8) / 4, pos = e % 4;
      const bool four = Sparse24ValueBits(f) == 4;
      const int code = (block[Sparse24CodesOffset(f) + 4 * r + v] >> (3 * half)) & 7;
      for (int slot = 0; slot < 2; ++slot) {
        if (kPairs24[code][slot] != pos) continue;
        if (!four) return static_cast<int8_t>(block[64 * v + 4 * r + 2 * half + slot]) + 128;
        return ((block[64 * (v % 2) + 4 * r + 2 * half + slot] >> (v < 2 ? 0 : 4)) & 0x0F) ^ 8;
      }
      return four ? 8 : 128;
    }
    if (f.bits == 8) return block[(e / 4) * 64 + 4 * r + e % 4];
    if (f.bits == 2) return (block[4 * r + e % 4] >> (2 * (e / 4))) & 3;
    if (f.bits == 3) {
      const int high = (block[64 + 4 * (r % 8) + e % 4] >> ((r >= 8 ? 4 : 0) + e / 4)) & 1;
      return ((block[4 * r + e % 4] >> (2 * (e / 4))) & 3) | high << 2;
    }
    const int half = f.block / 2;
    const int e2 = e % half;
    const uint8_t byte = block[(e2 / 4) * 64 + 4 * r + e2 % 4];
    int u = e < half ? (byte & 0x0F) : (byte >> 4);
    if (f.lut) return f.lut_u[u];
    if (f.bits > 4) {
      const int h = f.bits - 4;
      const uint8_t high = block[f.block * 8 + 4 * r + e % 4];
      u |= ((high >> (h * (e / 4))) & ((1 << h) - 1)) << 4;
    }
    return u;
  }

 private:
  const uint8_t* Unit(int64_t group, int64_t b) const {
    return data_.get() + static_cast<size_t>(group) * group_bytes() + static_cast<size_t>(b >> unit_shift()) * unit_bytes();
  }

  DType type_ = DType::kF32;
  PackFormat fmt_;
  int64_t n_in_ = 0, n_out_ = 0;
  std::unique_ptr<uint8_t[], AlignedFree> data_;
  std::vector<size_t> group_offset_;  // sparse-mask layout: [n_groups + 1]
  size_t mask_bytes_ = 0;             // sparse-mask layout: of all groups
};

// The packed layout's sizes for a format known at compile time (the kernels'
// address arithmetic): equal to PackedMatrix's for a matrix of that format.
template <int kBits, int kBlock, bool kMin, bool kF16, bool kFactored = false>
struct PackedGeometry {
  static constexpr size_t kQuantBytes = static_cast<size_t>(kBlock) * 16 * kBits / 8;
  static constexpr size_t kScaleBytes = kFactored ? 16 : kF16 ? 32 : 64;
  static constexpr size_t kScaleStride =
      kFactored && kBits == 3 ? 12 : kScaleBytes * (kMin && !(kFactored && kBits == 2) ? 2 : 1);
  static constexpr int kUnitShift = kFactored ? (kBlock == 16 ? 4 : 3) : kF16 && !kMin ? 1 : 0;
  static constexpr int64_t kPer = int64_t{1} << kUnitShift;
  static constexpr size_t kUnitBytes = kPer * (kQuantBytes + kScaleStride) + (kFactored ? 64 : 0);
  // Calls body(quants, scales, super_scales, b) for every k-block b < nb of
  // the group starting at `group`, in order, with constant offsets within a
  // unit (super_scales: the unit's d, dmin with factored scales).
  // Decode reads each group once, front to back, and a thread's groups are
  // one run of memory: every kernel fetches this far ahead of the k-block it
  // reads, so memory latency is hidden at each group's start too (m1b Q4_K
  // tg +35 %, m360 Q4_0 +18 % on the Zen 5 guest). One call per k-block b
  // (quants: its quant bytes): the call for the j-th k-block of a unit
  // fetches the j-th kPer-th of the unit kPrefetchBytes ahead, so the calls
  // cover whole units, their scale bytes too, not only the quant runs they
  // step over (Q3_K's 96-byte blocks left 224 of each 1,792-byte unit out).
  static constexpr size_t kPrefetchBytes = 4096;
  static constexpr size_t kPrefetchStep = (kUnitBytes + kPer - 1) / kPer;
  static inline __attribute__((always_inline)) void PrefetchAhead(const uint8_t* quants, int64_t b) {
    const size_t j = static_cast<size_t>(b) & (kPer - 1);
    const uint8_t* at = quants - j * kQuantBytes + kPrefetchBytes + j * kPrefetchStep;
#pragma GCC unroll 8
    for (size_t c = 0; c < (kPrefetchStep + 63) / 64; ++c) __builtin_prefetch(at + 64 * c, 0, 3);
  }
  // The pointers ForEachBlock passes for k-block b, computed directly (for
  // kernels that visit the blocks in chunks).
  static inline __attribute__((always_inline)) void BlockAt(const uint8_t* group, int64_t b, const uint8_t** quants,
                                                            const uint8_t** scales, const uint8_t** super) {
    const uint8_t* unit = group + static_cast<size_t>(b >> kUnitShift) * kUnitBytes;
    const size_t j = static_cast<size_t>(b & (kPer - 1));
    *quants = unit + j * kQuantBytes;
    *scales = unit + kPer * kQuantBytes + j * kScaleStride;
    *super = unit + kPer * (kQuantBytes + kScaleStride);
  }
  template <typename Body>
  static inline __attribute__((always_inline)) void ForEachBlock(const uint8_t* group, int64_t nb, Body&& body) {
    const uint8_t* super = group + kPer * (kQuantBytes + kScaleStride);
    int64_t b = 0;
    for (; b + kPer <= nb; b += kPer, group += kUnitBytes, super += kUnitBytes) {
#pragma GCC unroll 8
      for (int64_t j = 0; j < kPer; ++j) {
        body(group + j * kQuantBytes, group + kPer * kQuantBytes + j * kScaleStride, super, b + j);
      }
    }
    for (int64_t j = 0; b < nb; ++b, ++j) {  // a last partial unit
      body(group + j * kQuantBytes, group + kPer * kQuantBytes + j * kScaleStride, super, b);
    }
  }
};

// Activations of nt tokens quantized to int8 in blocks of 32 (x ≈ da * q),
// with per-k-block (of the weight format's `block`) values folded in. Per
// token t (views into a buffer owned by the caller):
//   q    [n]           int8
//   bias [n / block]   -(sum of the block's q) << shift (0 without shift)
//   da   [n / block]   the scale of the 32-block holding the k-block
//   dsum [n / block]   da * (sum of the block's q): for weight mins
struct QuantActs {
  int64_t n = 0, block = 32;
  const int8_t* q = nullptr;
  const int32_t* bias = nullptr;
  const float* da = nullptr;
  const float* dsum = nullptr;
  int64_t nb() const { return n / block; }
  const int8_t* Q(int64_t t) const { return q + t * n; }
  const int32_t* Bias(int64_t t) const { return bias + t * nb(); }
  const float* Da(int64_t t) const { return da + t * nb(); }
  const float* Dsum(int64_t t) const { return dsum + t * nb(); }
};

// One token: x [n] -> q [n] in 32-blocks (d = max|x| / 127, q = x / d
// rounded half to even), and per k-block of `block` (16 or 32) elements
// bias = -sum(q) * mul, da = d, dsum = d * sum(q). The reference defines it;
// ISA versions (KernelTable::quantize_token) match it bit for bit.
// A 32-block whose scale d would be subnormal (max |x| < 127 * FLT_MIN)
// quantizes to zeros: 1 / d would overflow.
inline constexpr float kMinActScale = 1.17549435e-38f;  // FLT_MIN
using QuantizeTokenFn = void (*)(const float* x, int64_t n, int64_t block, int32_t mul, int8_t* q, int32_t* bias,
                                 float* da, float* dsum);
void QuantizeTokenReference(const float* x, int64_t n, int64_t block, int32_t mul, int8_t* q, int32_t* bias,
                            float* da, float* dsum);

// Per-token quantization for row-scaled formats (PackFormat::row_scale): one
// token x [n] -> q [n] with a single scale d = max|x| / 127 (q = x * (1 / d)
// rounded half to even; zeros when d < kMinActScale), *bias = -sum(q) * 128,
// *da = d, *dsum = d * sum(q). ISA versions match it bit for bit.
using QuantizeTokenRowFn = void (*)(const float* x, int64_t n, int8_t* q, int32_t* bias, float* da, float* dsum);
void QuantizeTokenRowReference(const float* x, int64_t n, int8_t* q, int32_t* bias, float* da, float* dsum);

// x [nt, n] (row stride ldx) -> acts in `buf` (grown as needed, reused).
// n must be a multiple of 32. Tokens are split over `pool` when given.
// Row-scaled formats get one k-block per token (acts.block = n).
QuantActs QuantizeActs(const float* x, int64_t nt, int64_t ldx, int64_t n, const PackFormat& f,
                       std::vector<uint8_t>* buf, ThreadPool* pool = nullptr,
                       QuantizeTokenFn quantize_token = QuantizeTokenReference,
                       QuantizeTokenRowFn quantize_row = QuantizeTokenRowReference);

}  // namespace infera
