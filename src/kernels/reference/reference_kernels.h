// Portable scalar kernels: the oracle every ISA-specific kernel is tested
// against, and the path used on CPUs without AVX2.
#pragma once

#include "kernels/kernels.h"

namespace infera::reference {
void Fill(KernelTable* t);
}  // namespace infera::reference
