// The slots of a step of the tiled attention kernels (AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace infera {
// Internal linkage: each ISA file instantiates its own copy with its flags.
namespace {

// Whether tile c's 16 lanes (of a step whose lanes [j0, j1] are read) are
// all read and sit at the consecutive slots of one 16-slot group (KV blocks
// of whole groups: the usual case); *base: that group's first slot.
inline bool WholeGroup(const int32_t* slots, int c, int j0, int j1, int32_t* base) {
  const int c0 = c * kFlashTile;
  if (j0 > c0 || j1 < c0 + kFlashTile - 1) return false;
  *base = slots[c0];
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i want = _mm512_add_epi32(_mm512_set1_epi32(*base), iota);
  return *base % kFlashTile == 0 && _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(slots + c0), want) == 0xFFFF;
}

}  // namespace
}  // namespace infera
