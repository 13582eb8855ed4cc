// Picks the packed-format instantiation of a QGemm kernel at run time:
// Kernel::Run<bits, block, has_min, f16_scales, k_factored[, lut]>(...) for the
// matrix's PackFormat (GetPackFormat's formats; kernels instantiate only these).
#pragma once

#include "base/check.h"
#include "kernels/kernels.h"

namespace infera {
// Internal linkage: each ISA file instantiates its own copy with its flags.
namespace {

template <typename Kernel>
void DispatchPackFormat(const PackedMatrix& w, int64_t group, const QuantActs& a, int64_t t0, int nt, float* y) {
  const PackFormat& f = w.format();
  const bool m = f.has_min;
  if (f.k_factored) {  // Q4_K, Q5_K: blocks of 32 with mins; Q6_K: 6-bit blocks of 16; Q2_K 2-bit, Q3_K 3-bit
    if (f.bits == 2) return Kernel::template Run<2, 16, true, false, true>(w, group, a, t0, nt, y);
    if (f.bits == 3) return Kernel::template Run<3, 16, false, false, true>(w, group, a, t0, nt, y);
    if (f.lut && f.block == 16) return Kernel::template Run<4, 16, false, false, true, true>(w, group, a, t0, nt, y);  // IQ2_XS
    if (f.lut) return Kernel::template Run<4, 32, false, false, true, true>(w, group, a, t0, nt, y);  // IQ4_XS, IQ3_S
    if (!m) return Kernel::template Run<6, 16, false, false, true>(w, group, a, t0, nt, y);
    return f.bits == 4 ? Kernel::template Run<4, 32, true, false, true>(w, group, a, t0, nt, y)
                       : Kernel::template Run<5, 32, true, false, true>(w, group, a, t0, nt, y);
  }
  if (f.lut) return Kernel::template Run<4, 32, false, true, false, true>(w, group, a, t0, nt, y);  // IQ4_NL
  if (f.f16_scales) {
    if (f.bits == 4) {
      return m ? Kernel::template Run<4, 32, true, true, false>(w, group, a, t0, nt, y)
               : Kernel::template Run<4, 32, false, true, false>(w, group, a, t0, nt, y);
    }
    if (f.bits == 5) {  // Q5_1, Q5_0
      return m ? Kernel::template Run<5, 32, true, true, false>(w, group, a, t0, nt, y)
               : Kernel::template Run<5, 32, false, true, false>(w, group, a, t0, nt, y);
    }
    return m ? Kernel::template Run<8, 32, true, true, false>(w, group, a, t0, nt, y)
             : Kernel::template Run<8, 32, false, true, false>(w, group, a, t0, nt, y);
  }
  CHECK(f.bits == 4 && f.block == 32);  // 4-bit blocks of 32 with f32 scales: the last layout
  return m ? Kernel::template Run<4, 32, true, false, false>(w, group, a, t0, nt, y)
           : Kernel::template Run<4, 32, false, false, false>(w, group, a, t0, nt, y);
}

}  // namespace
}  // namespace infera
