#pragma once
#include "kernels/kernels.h"
namespace infera::amx {
// Prefill's quantized matmul on the AMX-INT8 tile unit (KernelTable::qgemm_tile16). Compiled with
// -mamx-tile -mamx-int8; call only when DetectCpuFeatures reports amx_int8 (which includes the
// process's tile-data permission).
void Fill(KernelTable* t);
}  // namespace infera::amx
