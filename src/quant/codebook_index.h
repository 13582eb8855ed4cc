// The search structures behind llama.cpp's codebook quantizers (IQ3_S,
// IQ2_XS), built as its iq3xs_init_impl / iq2xs_init_impl build them: a
// codebook of points with kDim coordinates 2l + 1 (l a level 0 .. n_levels - 1,
// coded in kBits bits: code = l0 | l1 << kBits | ...), the index from a code
// to its point, and for codes off the codebook the points at the `nwant`
// smallest squared distances (ties in point order). Immutable once built;
// shared read-only between threads.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"
#include "quant/quant_search.h"

namespace infera::kquants {

// Levels of xval [kDim] at inverse scale id (coordinates 2l + 1), clamped to
// 0 .. max_level - 1, into L [kDim].
template <int kDim>
void RoundTuple(const float* xval, float id, int max_level, int8_t* L) {
  for (int i = 0; i < kDim; ++i) {
    const int l = NearestInt(0.5f * (id * xval[i] - 1));
    L[i] = static_cast<int8_t>(std::max(0, std::min(max_level - 1, l)));
  }
}

// The weighted least-squares terms of levels L [n] against xval [n]:
// sumqx = sum w x q, sumq2 = sum w q^2 with q = 2l + 1, in llama.cpp's order.
inline void WeightedFit(int n, const float* weight, const float* xval, const int8_t* L, float* sumqx, float* sumq2) {
  *sumqx = 0;
  *sumq2 = 0;
  for (int i = 0; i < n; ++i) {
    const float w = weight[i];
    const float q = static_cast<float>(2 * L[i] + 1);
    *sumqx += w * xval[i] * q;
    *sumq2 += w * q * q;
  }
}

template <int kDim, int kBits>
class CodebookIndex {
 public:
  // points [n][kDim] levels; codes with a level >= n_levels are not indexed
  // (the quantizers clamp levels below it).
  CodebookIndex(const std::vector<std::array<int8_t, kDim>>& points, int n_levels, int nwant) : points_(points) {
    map_.assign(size_t{1} << (kBits * kDim), kNotIndexed);
    for (size_t p = 0; p < points_.size(); ++p) map_[Code(points_[p].data())] = static_cast<int>(p);
    std::vector<std::pair<int, int>> dist(points_.size());  // (d2, point)
    for (size_t code = 0; code < map_.size(); ++code) {
      if (map_[code] != kNotIndexed) continue;
      std::array<int8_t, kDim> l;
      bool in_range = true;
      for (int j = 0; j < kDim; ++j) {
        l[j] = static_cast<int8_t>((code >> (kBits * j)) & ((1 << kBits) - 1));
        in_range = in_range && l[j] < n_levels;
      }
      if (!in_range) continue;
      for (size_t p = 0; p < points_.size(); ++p) {
        int d2 = 0;
        for (int j = 0; j < kDim; ++j) d2 += 4 * (points_[p][j] - l[j]) * (points_[p][j] - l[j]);
        dist[p] = {d2, static_cast<int>(p)};
      }
      std::sort(dist.begin(), dist.end());
      const size_t start = neighbours_.size();
      map_[code] = -static_cast<int>(start + 1);
      neighbours_.push_back(0);
      int d2 = dist[0].first, have = 1, n = 0;
      for (const auto& [dd, p] : dist) {
        if (dd > d2) {
          if (have == nwant) break;
          d2 = dd;
          ++have;
        }
        neighbours_.push_back(static_cast<uint16_t>(p));
        ++n;
      }
      neighbours_[start] = static_cast<uint16_t>(n);
    }
  }

  static int Code(const int8_t* l) {
    int code = 0;
    for (int j = 0; j < kDim; ++j) code |= l[j] << (kBits * j);
    return code;
  }
  // The point of a code, or -1 when it is off the codebook.
  int Point(int code) const { return map_[code] >= 0 ? map_[code] : -1; }
  const std::array<int8_t, kDim>& Levels(int point) const { return points_[point]; }

  // Of the nearest points of an off-codebook code: the one closest to
  // xval [kDim] at `scale` (coordinates 2l + 1), weighted by w [kDim]; its
  // levels into L [kDim]. As llama.cpp's iq*_find_best_neighbour.
  int BestNeighbour(int code, const float* xval, const float* w, float scale, int8_t* L) const {
    CHECK(map_[code] < 0 && map_[code] != kNotIndexed);
    const uint16_t* nb = neighbours_.data() - map_[code] - 1;
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= nb[0]; ++j) {
      float d2 = 0;
      for (int i = 0; i < kDim; ++i) {
        const float q = static_cast<float>(2 * points_[nb[j]][i] + 1);
        const float diff = scale * q - xval[i];
        d2 += w[i] * diff * diff;
      }
      if (d2 < best_d2) {
        best_d2 = d2;
        best = nb[j];
      }
    }
    if (best < 0) best = nb[1];  // every distance NaN (non-finite input): any point, not a crash
    for (int i = 0; i < kDim; ++i) L[i] = points_[best][i];
    return best;
  }

  // How a quantizer's per-group scale search differs between the types.
  struct Search {
    float step;              // trial inverse scales (2 max_level - 1 + is * step) / max, is = -9 .. 9
    bool initially_on_grid;  // the on-codebook flags before any trial is taken (llama.cpp's per-type choice)
    bool resnap_all;         // afterwards re-snap every tuple (IQ3_S) or only the off-codebook ones (IQ2_XS)
  };
  // llama.cpp's scale search for one group of n_tuples tuples (at most
  // kMaxGroup elements): each trial scale snaps every tuple of xval to the
  // codebook (weights waux for the neighbour choice), the trial with the best
  // weighted fit (weights weight) wins; if some tuple of the winner was off
  // the codebook, the tuples are snapped again at the winning scale and the
  // scale refitted. Levels into L [n_tuples * kDim]; returns the scale.
  float SearchScale(int n_tuples, int max_level, float max, const Search& o, const float* weight, const float* waux,
                    const float* xval, int8_t* L) const {
    constexpr int kMaxGroup = 32;
    const int n = n_tuples * kDim;
    CHECK(n <= kMaxGroup);
    int8_t Laux[kMaxGroup];
    bool on_grid[kMaxGroup / kDim], on_grid_aux[kMaxGroup / kDim];
    float best = 0;
    float scale = max / static_cast<float>(2 * max_level - 1);
    std::fill(on_grid, on_grid + n_tuples, o.initially_on_grid);
    for (int is = -9; is <= 9; ++is) {
      const float id = (static_cast<float>(2 * max_level - 1) + static_cast<float>(is) * o.step) / max;
      const float this_scale = 1 / id;
      for (int k = 0; k < n_tuples; ++k) {
        RoundTuple<kDim>(xval + kDim * k, id, max_level, Laux + kDim * k);
        const int code = Code(Laux + kDim * k);
        on_grid_aux[k] = Point(code) >= 0;
        if (!on_grid_aux[k]) BestNeighbour(code, xval + kDim * k, waux + kDim * k, this_scale, Laux + kDim * k);
      }
      float sumqx, sumq2;
      WeightedFit(n, weight, xval, Laux, &sumqx, &sumq2);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        scale = sumqx / sumq2;
        best = scale * sumqx;
        std::copy(Laux, Laux + n, L);
        std::copy(on_grid_aux, on_grid_aux + n_tuples, on_grid);
      }
    }
    if (std::all_of(on_grid, on_grid + n_tuples, [](bool b) { return b; }) || !(scale > 0)) return scale;
    const float id = 1 / scale;
    for (int k = 0; k < n_tuples; ++k) {
      if (on_grid[k] && !o.resnap_all) continue;
      int8_t l[kDim];
      RoundTuple<kDim>(xval + kDim * k, id, max_level, l);
      const int code = Code(l);
      int p = Point(code);
      if (p < 0) p = BestNeighbour(code, xval + kDim * k, waux + kDim * k, scale, l);
      std::copy(points_[p].begin(), points_[p].end(), L + kDim * k);
    }
    float sumqx, sumq2;
    WeightedFit(n, weight, xval, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
    return scale;
  }

 private:
  static constexpr int kNotIndexed = INT32_MIN;
  std::vector<std::array<int8_t, kDim>> points_;
  std::vector<int> map_;
  std::vector<uint16_t> neighbours_;
};

}  // namespace infera::kquants
