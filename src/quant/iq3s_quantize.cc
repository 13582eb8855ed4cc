// IQ3_S quantization, following llama.cpp's quantize_row_iq3_s_impl step by
// step (float arithmetic in the same order) so that, given the same input and
// importance matrix, the blocks agree byte for byte with llama-quantize's:
// per 32-group, signs split off, a scale search over 19 trial scales in which
// each 4-tuple of 3-bit magnitudes is snapped to the nearest codebook point
// (kIq3sGrid; off-grid tuples go to the best of their precomputed nearest
// grid neighbours, weighted), then the group scales coded as 4-bit odd
// multiples of one f16 super-scale.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "quant/codebook_index.h"
#include "quant/kquants.h"
#include "quant/quant_search.h"
#include "tensor/quant_blocks.h"

namespace infera::kquants {
namespace {

constexpr int kIq3sMaxQ = 8;    // magnitudes 2l + 1, l = 0..7
constexpr int kIq3sGroup = 32;  // elements per scale
constexpr int kTuples = kIq3sGroup / 4;

using Iq3sIndex = CodebookIndex<4, 3>;

// The codebook's points as levels (magnitude byte j of kIq3sGrid = 2 l_j + 1);
// nearest points: those at the 3 smallest distances, as llama.cpp builds them.
const Iq3sIndex& Iq3sCodebook() {
  static const Iq3sIndex index = [] {  // thread-safe initialization
    std::vector<std::array<int8_t, 4>> points(512);
    for (int g = 0; g < 512; ++g) {
      for (int j = 0; j < 4; ++j) points[g][j] = static_cast<int8_t>((((kIq3sGrid[g] >> (8 * j)) & 0xFF) - 1) / 2);
    }
    return Iq3sIndex(points, kIq3sMaxQ, 3);
  }();
  return index;
}

}  // namespace

void QuantizeIq3s(const float* x, const float* qw, uint8_t* block) {
  const Iq3sIndex& index = Iq3sCodebook();
  std::memset(block, 0, kIq3sBlockBytes);
  uint8_t* qs = block + 2;
  uint8_t* qh = block + 66;
  uint8_t* signs = block + 74;
  float scales[8];
  float weight[kIq3sGroup], waux[kIq3sGroup], xval[kIq3sGroup];
  int8_t L[kIq3sGroup];
  uint8_t block_signs[kIq3sGroup / 8];
  float max_scale = 0;
  float sumx2 = 0;
  for (int i = 0; i < 256; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = 2 * sumx2 / 256;
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = x + kIq3sGroup * ib;
    if (qw != nullptr) {
      for (int i = 0; i < kIq3sGroup; ++i) weight[i] = qw[kIq3sGroup * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < kIq3sGroup; ++i) weight[i] = xb[i] * xb[i];
    }
    for (int i = 0; i < kIq3sGroup; ++i) waux[i] = std::sqrt(weight[i]);
    for (int k = 0; k < kIq3sGroup / 8; ++k) {
      uint8_t s = 0;
      for (int i = 0; i < 8; ++i) {
        if (xb[8 * k + i] >= 0) {
          xval[8 * k + i] = xb[8 * k + i];
        } else {
          xval[8 * k + i] = -xb[8 * k + i];
          s |= static_cast<uint8_t>(1 << i);
        }
      }
      block_signs[k] = s;
    }
    float max = xval[0];
    for (int i = 1; i < kIq3sGroup; ++i) max = max > xval[i] ? max : xval[i];
    std::memset(L, 0, sizeof(L));
    if (max == 0) {
      // An all-zero group keeps zero bytes (it decodes to +-d, the format's
      // smallest magnitude). Deliberate difference: llama.cpp's quantizer
      // (as of 2026) does not advance its qs / signs cursors here, so every
      // later group of the block is stored one slot early and decodes wrong;
      // infera writes each group in its own slot. Blocks without an all-zero
      // group are byte-identical.
      scales[ib] = 0;
      qs += kTuples;
      signs += kIq3sGroup / 8;
      continue;
    }
    // Trial scales 0.2 apart; every tuple re-snapped after.
    float scale = index.SearchScale(kTuples, kIq3sMaxQ, max, {0.2f, false, true}, weight, waux, xval, L);
    if (scale < 0) {  // cannot happen with these weights; kept as llama.cpp keeps it
      scale = -scale;
      for (uint8_t& s : block_signs) s = static_cast<uint8_t>(~s);
    }
    for (int k = 0; k < kTuples; ++k) {
      const int g = index.Point(Iq3sIndex::Code(L + 4 * k));
      CHECK(g >= 0);
      qs[k] = static_cast<uint8_t>(g & 255);
      qh[(ib * kTuples + k) / 8] |= static_cast<uint8_t>((g >> 8) << ((ib * kTuples + k) % 8));
    }
    qs += kTuples;
    std::memcpy(signs, block_signs, sizeof(block_signs));
    signs += sizeof(block_signs);
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }
  if (max_scale == 0) return;
  const float d = max_scale / 31;
  PutHalf(block, d * 1.033f);
  const float id = 1 / d;
  for (int ib = 0; ib < 8; ib += 2) {
    const int l1 = std::max(0, std::min(15, NearestInt(0.5f * (id * scales[ib] - 1))));
    const int l2 = std::max(0, std::min(15, NearestInt(0.5f * (id * scales[ib + 1] - 1))));
    block[106 + ib / 2] = static_cast<uint8_t>(l1 | (l2 << 4));
  }
}

}  // namespace infera::kquants
