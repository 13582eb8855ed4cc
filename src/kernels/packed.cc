#include "kernels/packed.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "kernels/reference/unpack.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera {

PackFormat GetPackFormat(DType t) {
  switch (t) {
    case DType::kQ4_0: return {true, 4, 32, false, 3, true};
    case DType::kQ4_1: return {true, 4, 32, true, -1, true};
    case DType::kQ4_K: return {true, 4, 32, true, -1, false, true};
    case DType::kQ2_K: return {true, 2, 16, true, -1, false, true};
    case DType::kQ3_K: return {true, 3, 16, false, 2, false, true};
    case DType::kQ8_0: return {true, 8, 32, false, 7, true};
    case DType::kW8A8: {
      PackFormat f{true, 8, 32, false, 7, true};
      f.row_scale = true;
      return f;
    }
    case DType::kQ8_0S24: return {true, 5, 32, false, 7, true, false, false, true};
    case DType::kQ4_0S24: return {true, 3, 32, false, 3, true, false, false, true};
    // 4:8 sparse Q8_0: packed as the Q8_0 it stands for (by masks where the
    // CPU has the sparse-mask kernels, else dense).
    case DType::kQ8_0S48: return {true, 8, 32, false, 7, true};
    case DType::kIQ4_NL: return {true, 4, 32, false, 7, true, false, true};
    // IQ4_XS, IQ3_S: factored as the file has them, d per super-block and
    // an int8 sub-scale (ls - 32, 1 + 2 sc) per 32.
    case DType::kIQ4_XS: return {true, 4, 32, false, 7, false, true, true};
    case DType::kQ5_0: return {true, 5, 32, false, 4, true};
    // IQ3_S: its 16 values (odd, -15..15) as 4-bit codes into kIq3sU, scales
    // d * (1 + 2 * sc) factored: IQ4_XS's kernels with another table.
    case DType::kIQ3_S: {
      PackFormat f{true, 4, 32, false, 7, false, true, true};
      f.lut_u = kIq3sU;
      return f;
    }
    // IQ2_XS: its six values (+-8, +-25, +-43) as 4-bit codes into kIq2xsU,
    // blocks of 16, scales factored as the file has them: d per super-block
    // and 1 + 2 * sc per 16 (s = d * (1 + 2 sc) * 0.125, the file's
    // d * (0.5 + sc) * 0.25 exactly).
    case DType::kIQ2_XS: {
      PackFormat f{true, 4, 16, false, 7, false, true, true};
      f.lut_u = kIq2xsU;
      return f;
    }
    case DType::kQ5_1: return {true, 5, 32, true, -1, true};
    case DType::kQ5_K: return {true, 5, 32, true, -1, false, true};
    case DType::kQ6_K: return {true, 6, 16, false, 5, false, true};
    default: return {};
  }
}

void AlignedFree::operator()(uint8_t* p) const { std::free(p); }

namespace {

// A lookup table inverted: u -> its first code, 0xFF where u is in no entry.
std::array<uint8_t, 256> LutCodes(const uint8_t* lut_u) {
  std::array<uint8_t, 256> codes{};
  for (auto& c : codes) c = 0xFF;
  for (int i = 15; i >= 0; --i) codes[lut_u[i]] = static_cast<uint8_t>(i);
  return codes;
}

float F16At(const uint8_t* p, int i) {
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return Fp16ToFp32(h);
}

float F32At(const uint8_t* p, int i) {
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

}  // namespace

float PackedMatrix::Scale(int64_t group, int64_t b, int r) const {
  const uint8_t* p = Scales(group, b);
  if (fmt_.k_factored && fmt_.bits == 3) {  // Q3_K: 6-bit, offset 32
    const int sc = ((p[r % 8] >> (r >= 8 ? 4 : 0)) & 15) | ((p[8 + r / 4] >> (2 * (r % 4))) & 3) << 4;
    return F16At(SuperScales(group, b), r) * static_cast<float>(sc - 32);
  }
  if (fmt_.k_factored) {  // Q6_K's sub-scales are signed; Q2_K's the low nibble
    const float sc = nibble_scales() ? static_cast<float>(p[r] & 0x0F)
                     : fmt_.has_min  ? static_cast<float>(p[r])
                                     : static_cast<float>(static_cast<int8_t>(p[r]));
    const float s = F16At(SuperScales(group, b), r) * sc;
    return eighth_scales() ? s * 0.125f : s;
  }
  return fmt_.f16_scales ? F16At(p, r) : F32At(p, r);
}

float PackedMatrix::Min(int64_t group, int64_t b, int r) const {
  if (nibble_scales()) {
    return -(F16At(SuperScales(group, b), kRows + r) * static_cast<float>(Scales(group, b)[r] >> 4));
  }
  const uint8_t* p = Scales(group, b) + scale_bytes();
  if (fmt_.k_factored) return -(F16At(SuperScales(group, b), kRows + r) * static_cast<float>(p[r]));
  return fmt_.f16_scales ? F16At(p, r) : F32At(p, r);
}

bool PackedMatrix::IsSparse24(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out) {
  if (t == DType::kQ8_0S24 || t == DType::kQ4_0S24) return true;
  if (t != DType::kQ8_0 && t != DType::kQ4_0) return false;
  const bool q8 = t == DType::kQ8_0;
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t b = 0; b < n_in / 32; ++b) {
      const uint8_t* blk = w + r * row_bytes + b * (q8 ? 34 : 18);
      if (!(q8 ? Q8_0BlockIs24(blk) : Q4_0BlockIs24(blk))) return false;
    }
  }
  return true;
}

double PackedMatrix::ZeroFraction(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out) {
  if ((t != DType::kQ8_0 && t != DType::kQ8_0S48) || n_in <= 0 || n_out <= 0) return 0.0;
  const int block_bytes = t == DType::kQ8_0 ? 34 : kQ8_0S48Bytes;
  int64_t zeros = 0;
  uint8_t dense[34];
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t b = 0; b < n_in / 32; ++b) {
      const uint8_t* blk = w + r * row_bytes + b * block_bytes;
      if (t == DType::kQ8_0S48) {
        ExpandQ8_0S48Block(blk, dense);
        blk = dense;
      }
      for (int j = 0; j < 32; ++j) zeros += blk[2 + j] == 0;
    }
  }
  return static_cast<double>(zeros) / static_cast<double>(n_in * n_out);
}

const uint8_t* PackedMatrix::ExpandMaskBlock(const uint8_t* p, uint8_t (*u)[32], float* s) {
  const uint8_t* vals = p + 96;
  for (int c = 0; c < 8; ++c) {
    uint64_t mask;
    std::memcpy(&mask, p + 8 * c, 8);
    for (int i = 0; i < 64; ++i) {
      u[i / 4][4 * c + i % 4] = (mask >> i) & 1 ? static_cast<uint8_t>(*vals++ ^ 0x80) : 128;
    }
  }
  for (int r = 0; r < kRows; ++r) s[r] = F16At(p + 64, r);
  return vals;
}

namespace {

// The sparse-mask layout of a Q8_0 matrix (see PackFormat::sparse_mask).
PackedMatrix PackMask(PackedMatrix pm, const uint8_t* w, size_t row_bytes) {
  constexpr int kR = PackedMatrix::kRows;
  const int64_t n_in = pm.n_in(), n_out = pm.n_out(), nb = n_in / 32;
  std::vector<std::vector<uint8_t>> groups(pm.n_groups());
  for (int64_t g = 0; g < pm.n_groups(); ++g) {
    std::vector<uint8_t>& out = groups[g];
    for (int64_t b = 0; b < nb; ++b) {
      const size_t at = out.size();
      out.resize(at + 96);
      for (int r = 0; r < kR; ++r) {
        const int64_t row = g * kR + r;
        const uint8_t* blk = row < n_out ? w + row * row_bytes + b * 34 : nullptr;
        if (blk != nullptr) std::memcpy(&out[at + 64 + 2 * r], blk, 2);  // f16 d
      }
      for (int c = 0; c < 8; ++c) {
        uint64_t mask = 0;
        for (int i = 0; i < 64; ++i) {
          const int64_t row = g * kR + i / 4;
          const uint8_t q = row < n_out ? w[row * row_bytes + b * 34 + 2 + 4 * c + i % 4] : 0;
          if (q != 0) {
            mask |= uint64_t{1} << i;
            out.push_back(q);
          }
        }
        std::memcpy(&out[at + 8 * c], &mask, 8);
      }
    }
  }
  return pm.AdoptGroups(groups);
}

}  // namespace

PackedMatrix PackedMatrix::DenseGroup(DType t, int64_t n_in) {
  CHECK(t == DType::kQ8_0 || t == DType::kQ4_0);
  PackedMatrix pm;
  pm.type_ = t;
  pm.fmt_ = GetPackFormat(t);
  pm.n_in_ = n_in;
  pm.n_out_ = kRows;
  const size_t bytes = (pm.bytes() + 63) / 64 * 64;
  pm.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
  CHECK(pm.data_ != nullptr);
  return pm;
}

PackedMatrix PackedMatrix::AdoptGroups(const std::vector<std::vector<uint8_t>>& groups) {
  group_offset_.assign(1, 0);
  for (const auto& g : groups) group_offset_.push_back(group_offset_.back() + g.size());
  mask_bytes_ = group_offset_.back();
  // 64 bytes of slack: kernels load whole vectors from the last values.
  const size_t bytes = (group_offset_.back() + 64 + 63) / 64 * 64;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  CHECK(data_ != nullptr);
  std::memset(data_.get(), 0, bytes);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].empty()) std::memcpy(data_.get() + group_offset_[g], groups[g].data(), groups[g].size());
  }
  return std::move(*this);
}

PackedMatrix PackedMatrix::Pack(DType t, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_out,
                                SparseLayout layout) {
  PackedMatrix pm;
  pm.type_ = t;
  if (layout == SparseLayout::kMask) {
    CHECK((t == DType::kQ8_0 || t == DType::kQ8_0S48) && n_in % 32 == 0);
    pm.fmt_ = GetPackFormat(DType::kQ8_0);
    pm.fmt_.sparse_mask = true;
    pm.n_in_ = n_in;
    pm.n_out_ = n_out;
    if (t == DType::kQ8_0S48) {  // through the Q8_0 blocks it stands for (a temporary copy)
      const int64_t nb = n_in / 32;
      std::vector<uint8_t> q8(static_cast<size_t>(n_out * nb * 34));
      for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
          ExpandQ8_0S48Block(w + r * row_bytes + b * kQ8_0S48Bytes, q8.data() + (r * nb + b) * 34);
        }
      }
      return PackMask(std::move(pm), q8.data(), static_cast<size_t>(nb * 34));
    }
    return PackMask(std::move(pm), w, row_bytes);
  }
  const bool sparse24 = layout == SparseLayout::k24;
  const bool four = t == DType::kQ4_0 || t == DType::kQ4_0S24;  // (for sparse24: 4-bit values)
  pm.fmt_ = GetPackFormat(sparse24 ? (four ? DType::kQ4_0S24 : DType::kQ8_0S24)
                          : t == DType::kQ8_0S24 ? DType::kQ8_0
                          : t == DType::kQ4_0S24 ? DType::kQ4_0
                                                 : t);
  CHECK(!sparse24 || four || t == DType::kQ8_0 || t == DType::kQ8_0S24);
  CHECK(pm.fmt_.supported);
  CHECK(n_in % 32 == 0);
  CHECK(!pm.fmt_.row_scale || n_in <= kW8A8MaxRow);
  pm.n_in_ = n_in;
  pm.n_out_ = n_out;
  const size_t bytes = (pm.bytes() + 63) / 64 * 64;
  pm.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
  CHECK(pm.data_ != nullptr);
  std::memset(pm.data_.get(), 0, bytes);
  const UnpackRowFn unpack = reference::ScalarUnpacker(t);
  const std::array<uint8_t, 256> lut_codes = LutCodes(pm.fmt_.lut_u);
  const PackFormat& f = pm.fmt_;
  const int64_t n_pad = RoundUpToUnit(n_in);
  std::vector<uint8_t> u(n_pad);
  std::vector<float> s16(n_pad / 16), m16(n_pad / 16);
  const int half = f.block / 2;
  for (int64_t row = 0; row < n_out; ++row) {
    const int64_t g = row / kRows;
    const int r = static_cast<int>(row % kRows);
    unpack(w + row * row_bytes, n_in, u.data(), s16.data(), m16.data());
    for (int64_t b = 0; b < pm.n_blocks(); ++b) {
      uint8_t* blk = const_cast<uint8_t*>(pm.Block(g, b));
      const uint8_t* ub = u.data() + b * f.block;
      uint8_t code[32];
      if (f.sparse24) {  // each 4-group's nonzeros (padded with its first zeros)
        const int zero = 1 << f.shift;  // u of a zero: 128 (8-bit values) or 8 (4-bit)
        for (int e = 0; e < f.block; e += 4) {
          int keep[2], n = 0;
          for (int j = 0; j < 4 && n < 2; ++j) {
            if (ub[e + j] != zero) keep[n++] = j;
          }
          for (int j = 0; j < 4 && n < 2; ++j) {
            if (ub[e + j] == zero && (n == 0 || keep[0] != j)) keep[n++] = j;
          }
          if (keep[0] > keep[1]) std::swap(keep[0], keep[1]);
          int c = 0;
          while (kPairs24[c][0] != keep[0] || kPairs24[c][1] != keep[1]) ++c;
          for (int j = 0; j < 4; ++j) CHECK(ub[e + j] == zero || j == keep[0] || j == keep[1]);
          const int v = e / 8, half = (e % 8) / 4;
          for (int slot = 0; slot < 2; ++slot) {
            const uint8_t val = static_cast<uint8_t>(ub[e + keep[slot]] ^ zero);
            if (zero == 128) {
              blk[64 * v + 4 * r + 2 * half + slot] = val;
            } else {
              blk[64 * (v % 2) + 4 * r + 2 * half + slot] |= static_cast<uint8_t>(val << (v < 2 ? 0 : 4));
            }
          }
          blk[Sparse24CodesOffset(f) + 4 * r + v] |= static_cast<uint8_t>(c << (3 * half));
        }
      } else if (f.bits == 8) {
        for (int e = 0; e < f.block; ++e) blk[(e / 4) * 64 + 4 * r + e % 4] = ub[e];
      } else if (f.bits == 2 || f.bits == 3) {
        for (int e = 0; e < f.block; ++e) {
          CHECK(ub[e] < (1 << f.bits));
          blk[4 * r + e % 4] |= static_cast<uint8_t>((ub[e] & 3) << (2 * (e / 4)));
          if (f.bits == 3) blk[64 + 4 * (r % 8) + e % 4] |= static_cast<uint8_t>((ub[e] >> 2) << ((r >= 8 ? 4 : 0) + e / 4));
        }
      } else {
        if (f.lut) {  // u back to its code
          for (int e = 0; e < f.block; ++e) {
            code[e] = lut_codes[ub[e]];
            CHECK(code[e] != 0xFF);
          }
          ub = code;
        }
        for (int e = 0; e < half; ++e) {
          blk[(e / 4) * 64 + 4 * r + e % 4] = static_cast<uint8_t>((ub[e] & 0x0F) | ((ub[e + half] & 0x0F) << 4));
        }
        const int h = f.bits - 4;  // high bits, after the nibbles
        for (int e = 0; h > 0 && e < f.block; ++e) {
          CHECK(ub[e] < (1 << f.bits));
          blk[f.block * 8 + 4 * r + e % 4] |= static_cast<uint8_t>((ub[e] >> 4) << (h * (e / 4)));
        }
      }
      const float s = s16[b * f.block / 16], m = m16[b * f.block / 16];
      uint8_t* sp = const_cast<uint8_t*>(pm.Scales(g, b));
      if (pm.nibble_scales()) {  // Q2_K: scale bytes [16] at 0, d at 80, dmin at 82
        const uint8_t* hdr = w + row * row_bytes + (b / 16) * GetDTypeInfo(t).type_size;
        sp[r] = hdr[b % 16];
        uint8_t* sup = const_cast<uint8_t*>(pm.SuperScales(g, b));
        std::memcpy(sup + 2 * r, hdr + 80, 2);
        std::memcpy(sup + 2 * (kRows + r), hdr + 82, 2);
        CHECK(pm.Scale(g, b, r) == s || (s != s));
        CHECK(pm.Min(g, b, r) == m || (m != m));
      } else if (f.k_factored && f.bits == 3) {  // Q3_K: 6-bit sc packed at 96, d at 108
        const uint8_t* hdr = w + row * row_bytes + (b / 16) * GetDTypeInfo(t).type_size;
        const int j = static_cast<int>(b % 16);
        const int low = j < 8 ? (hdr[96 + j] & 0x0F) : (hdr[96 + j - 8] >> 4);
        const int high = (hdr[96 + 8 + j % 4] >> (2 * (j / 4))) & 3;
        sp[r % 8] |= static_cast<uint8_t>(low << (r >= 8 ? 4 : 0));
        sp[8 + r / 4] |= static_cast<uint8_t>(high << (2 * (r % 4)));
        std::memcpy(const_cast<uint8_t*>(pm.SuperScales(g, b)) + 2 * r, hdr + 108, 2);
        CHECK(pm.Scale(g, b, r) == s || (s != s));
      } else if (f.k_factored && f.lut) {  // IQ4_XS, IQ3_S, IQ2_XS: f16 d at 0, an int sub-scale per k-block
        const int per = 256 / f.block;  // k-blocks per super-block
        const uint8_t* hdr = w + row * row_bytes + (b / per) * GetDTypeInfo(t).type_size;
        const int j = static_cast<int>(b % per);
        const int sc = t == DType::kIQ4_XS ? Iq4XsSubScaleInt(hdr, j)
                       : t == DType::kIQ3_S ? Iq3sSubScaleInt(hdr, j)
                                            : Iq2xsSubScaleInt(hdr, j);
        sp[r] = static_cast<uint8_t>(static_cast<int8_t>(sc));
        std::memcpy(const_cast<uint8_t*>(pm.SuperScales(g, b)) + 2 * r, hdr, 2);
        CHECK(pm.Scale(g, b, r) == s || (s != s));
      } else if (f.k_factored && !f.has_min) {  // Q6_K: int8 sc [16] at 192, d at 208
        const uint8_t* hdr = w + row * row_bytes + (b / 16) * GetDTypeInfo(t).type_size;
        sp[r] = hdr[192 + b % 16];
        std::memcpy(const_cast<uint8_t*>(pm.SuperScales(g, b)) + 2 * r, hdr + 208, 2);
        CHECK(pm.Scale(g, b, r) == s || (s != s));
      } else if (f.k_factored) {
        // The file's own d, dmin and 6-bit sub-scales (s and m are made from
        // them with the same f32 operations as the unpacker's).
        const int64_t sb = b / 8;  // super-block of 256
        const uint8_t* hdr = w + row * row_bytes + sb * GetDTypeInfo(t).type_size;
        uint16_t d, dmin;
        uint8_t sc[8], mn[8];
        reference::KScaleMinInts(hdr, &d, &dmin, sc, mn);
        sp[r] = sc[b % 8];
        sp[pm.scale_bytes() + r] = mn[b % 8];
        uint8_t* sup = const_cast<uint8_t*>(pm.SuperScales(g, b));
        std::memcpy(sup + 2 * r, &d, 2);
        std::memcpy(sup + 2 * (kRows + r), &dmin, 2);
        CHECK(pm.Scale(g, b, r) == s || (s != s));
        CHECK(pm.Min(g, b, r) == m || (m != m));
      } else if (f.f16_scales) {
        // The unpacker's values are the file's f16 ones: stored exactly (a
        // NaN scale from a damaged file stays NaN).
        const uint16_t sh = Fp32ToFp16(s), mh = Fp32ToFp16(m);
        CHECK((Fp16ToFp32(sh) == s || s != s) && (!f.has_min || Fp16ToFp32(mh) == m || m != m));
        std::memcpy(sp + 2 * r, &sh, 2);
        if (f.has_min) std::memcpy(sp + pm.scale_bytes() + 2 * r, &mh, 2);
      } else {
        std::memcpy(sp + 4 * r, &s, 4);
        if (f.has_min) std::memcpy(sp + pm.scale_bytes() + 4 * r, &m, 4);
      }
    }
  }
  return pm;
}

namespace {

// Round half to even for |v| < 2^22, as nearbyint in the default rounding
// mode, in plain arithmetic the compiler vectorizes.
inline float RoundEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

}  // namespace

void QuantizeTokenReference(const float* xt, int64_t n, int64_t B, int32_t mul, int8_t* qt, int32_t* bias,
                            float* da, float* dsum) {
  for (int64_t b32 = 0; b32 < n / 32; ++b32) {
    const float* xb = xt + b32 * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d >= kMinActScale ? 1.0f / d : 0.0f;
    int8_t* qb = qt + b32 * 32;
    for (int i = 0; i < 32; ++i) qb[i] = static_cast<int8_t>(RoundEven(xb[i] * id));
    for (int64_t b = b32 * 32 / B; b < (b32 + 1) * 32 / B; ++b) {
      int32_t sum = 0;
      for (int64_t i = 0; i < B; ++i) sum += qt[b * B + i];
      bias[b] = -sum * mul;
      da[b] = d;
      dsum[b] = d * static_cast<float>(sum);
    }
  }
}

void QuantizeTokenRowReference(const float* x, int64_t n, int8_t* q, int32_t* bias, float* da, float* dsum) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d >= kMinActScale ? 1.0f / d : 0.0f;
  int32_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = static_cast<int8_t>(RoundEven(x[i] * id));
    sum += q[i];
  }
  *bias = -sum * 128;
  *da = d;
  *dsum = d * static_cast<float>(sum);
}

QuantActs QuantizeActs(const float* x, int64_t nt, int64_t ldx, int64_t n, const PackFormat& f,
                       std::vector<uint8_t>* buf, ThreadPool* pool, QuantizeTokenFn quantize_token,
                       QuantizeTokenRowFn quantize_row) {
  CHECK(n % 32 == 0);
  const int64_t B = f.row_scale ? n : f.block, nb = n / B;
  // Per token: q n bytes, bias/da/dsum 4 bytes per k-block each.
  const size_t q_bytes = (static_cast<size_t>(nt * n) + 63) / 64 * 64;
  const size_t need = q_bytes + static_cast<size_t>(nt * nb) * 12 + 64;
  if (buf->size() < need) buf->resize(need);
  uint8_t* base = buf->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* bias = reinterpret_cast<int32_t*>(base + q_bytes);
  auto* da = reinterpret_cast<float*>(bias + nt * nb);
  float* dsum = da + nt * nb;
  const int32_t mul = f.shift >= 0 ? (1 << f.shift) : 0;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (f.row_scale) {
        quantize_row(x + t * ldx, n, q + t * n, bias + t, da + t, dsum + t);
      } else {
        quantize_token(x + t * ldx, n, B, mul, q + t * n, bias + t * nb, da + t * nb, dsum + t * nb);
      }
    }
  };
  if (pool != nullptr && nt > 1) pool->ParallelFor(nt, 1, run);
  else run(0, nt);
  return QuantActs{n, B, q, bias, da, dsum};
}

}  // namespace infera
