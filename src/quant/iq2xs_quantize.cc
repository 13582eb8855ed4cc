// IQ2_XS quantization, following llama.cpp's quantize_row_iq2_xs_impl step
// by step (float arithmetic in the same order) so that, given the same input
// and importance matrix, the blocks agree byte for byte with llama-quantize's:
// per 16-group, signs split off (an odd count of negatives flips the
// element that matters least, since the format stores 7 signs of 8 and
// implies the eighth), a scale search over 19 trial scales in which each
// 8-tuple of levels 0..2 is snapped to the nearest codebook point
// (kIq2xsGrid; off-codebook tuples to the best of their nearest points,
// weighted), then the group scales coded as 4-bit multiples of one f16
// super-scale. llama.cpp requires an importance matrix for this type; without
// one (qw null) infera weighs every column 1.
#include <algorithm>
#include <array>
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

constexpr int kIq2xsMaxQ = 3;  // levels 0..2: magnitudes 1, 3, 5 in the search
constexpr int kIq2xsGroup = 16;
constexpr float kGroupMaxEps = 1e-15f;

using Iq2xsIndex = CodebookIndex<8, 2>;

// The codebook's points as levels (magnitude bytes 0x08, 0x19, 0x2b are
// levels 0, 1, 2); nearest points: those at the 2 smallest distances.
const Iq2xsIndex& Iq2xsCodebook() {
  static const Iq2xsIndex index = [] {  // thread-safe initialization
    std::vector<std::array<int8_t, 8>> points(512);
    for (int g = 0; g < 512; ++g) {
      for (int j = 0; j < 8; ++j) {
        const int b = static_cast<int>((kIq2xsGrid[g] >> (8 * j)) & 0xFF);
        CHECK(b == 0x08 || b == 0x19 || b == 0x2b);
        points[g][j] = static_cast<int8_t>(b == 0x08 ? 0 : b == 0x19 ? 1 : 2);
      }
    }
    return Iq2xsIndex(points, kIq2xsMaxQ, 2);
  }();
  return index;
}

}  // namespace

void QuantizeIq2Xs(const float* x, const float* qw, uint8_t* block) {
  const Iq2xsIndex& index = Iq2xsCodebook();
  std::memset(block, 0, kIq2xsBlockBytes);
  uint16_t q2[32] = {};
  float scales[16];
  float weight[kIq2xsGroup], waux[kIq2xsGroup], xval[kIq2xsGroup];
  int8_t L[kIq2xsGroup];
  uint8_t block_signs[2];
  float max_scale = 0;
  float sumx2 = 0;
  for (int i = 0; i < 256; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = sumx2 / 256;
  for (int ib = 0; ib < 16; ++ib) {
    const float* xb = x + kIq2xsGroup * ib;
    for (int i = 0; i < kIq2xsGroup; ++i) {
      weight[i] = (qw != nullptr ? qw[kIq2xsGroup * ib + i] : 1.0f) * std::sqrt(sigma2 + xb[i] * xb[i]);
    }
    for (int i = 0; i < kIq2xsGroup; ++i) waux[i] = std::sqrt(weight[i]);
    for (int k = 0; k < 2; ++k) {
      int nflip = 0;
      uint8_t s = 0;
      for (int i = 0; i < 8; ++i) {
        if (xb[8 * k + i] >= 0) {
          xval[8 * k + i] = xb[8 * k + i];
        } else {
          xval[8 * k + i] = -xb[8 * k + i];
          ++nflip;
          s |= static_cast<uint8_t>(1 << i);
        }
      }
      if (nflip % 2 != 0) {  // the least important element takes the implied sign
        int imin = 0;
        float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
        for (int i = 1; i < 8; ++i) {
          const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
          if (ax < min) {
            min = ax;
            imin = i;
          }
        }
        xval[8 * k + imin] = -xval[8 * k + imin];
        s ^= static_cast<uint8_t>(1 << imin);
      }
      block_signs[k] = s & 127;
    }
    float max = xval[0];
    for (int i = 1; i < kIq2xsGroup; ++i) max = max > xval[i] ? max : xval[i];
    std::memset(L, 0, sizeof(L));
    if (max < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // Trial scales 0.1 apart; only the off-codebook tuples re-snapped after.
    float scale = index.SearchScale(2, kIq2xsMaxQ, max, {0.1f, true, false}, weight, waux, xval, L);
    if (scale < 0) {  // kept as llama.cpp keeps it
      scale = -scale;
      for (uint8_t& s : block_signs) s = static_cast<uint8_t>(~s & 127);
    }
    for (int k = 0; k < 2; ++k) {
      const int g = index.Point(Iq2xsIndex::Code(L + 8 * k));
      CHECK(g >= 0);
      q2[2 * ib + k] = static_cast<uint16_t>(g | (block_signs[k] << 9));
    }
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }
  if (max_scale == 0) return;
  const float d = max_scale / 31;
  PutHalf(block, d);
  const float id = 1 / d;
  for (int ib = 0; ib < 16; ++ib) {
    const int l = std::max(0, std::min(15, NearestInt(0.5f * (id * scales[ib] - 1))));
    block[66 + ib / 2] |= static_cast<uint8_t>(l << (4 * (ib % 2)));
  }
  std::memcpy(block + 2, q2, sizeof(q2));
}

}  // namespace infera::kquants
