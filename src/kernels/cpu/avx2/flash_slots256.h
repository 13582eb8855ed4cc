// The slots of a step of the tiled attention kernels (AVX2).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace infera::avx2 {
// Internal linkage: each ISA file instantiates its own copy with its flags.
namespace {

// Whether tile c's 16 lanes (of a step whose lanes [j0, j1] are read) are
// all read and sit at the consecutive slots of one 16-slot group (KV blocks
// of whole groups: the usual case); *base: that group's first slot.
inline bool WholeGroup(const int32_t* slots, int c, int j0, int j1, int32_t* base) {
  const int c0 = c * kFlashTile;
  if (j0 > c0 || j1 < c0 + kFlashTile - 1) return false;
  *base = slots[c0];
  if (*base % kFlashTile != 0) return false;
  const __m256i w0 = _mm256_add_epi32(_mm256_set1_epi32(*base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i w1 = _mm256_add_epi32(w0, _mm256_set1_epi32(8));
  const __m256i e0 = _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(slots + c0)), w0);
  const __m256i e1 = _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(slots + c0 + 8)), w1);
  return _mm256_movemask_epi8(_mm256_and_si256(e0, e1)) == -1;
}

}  // namespace
}  // namespace infera::avx2
