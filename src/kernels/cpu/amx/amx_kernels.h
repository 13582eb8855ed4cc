#pragma once
#include "kernels/kernels.h"
namespace infera::amx {
// Prefill's quantized matmul on the AMX-INT8 tile unit (KernelTable::qgemm_tile16). Compiled with
// -mamx-tile -mamx-int8; call only when DetectCpuFeatures reports amx_int8 (which includes the
// process's tile-data permission).
void Fill(KernelTable* t);
// Float matmuls with bf16 products on the AMX-BF16 tile unit (KernelTable::bf16_tile_rows,
// amx_bf16.cc). Call only when the CPU has AMX-BF16 and AVX512-BF16 and the process has the
// tile-data permission.
void FillBf16(KernelTable* t);
// The same kernel on a software model of the tile instructions (tests: it runs wherever
// AVX512-BF16 does, and gives the bits the scalar definition gives).
Bf16TileRowsFn Bf16TileRowsEmulated();
// FillBf16's Bf16PairsFn (AVX-512 only: tests run it without AMX).
Bf16PairsFn Bf16PairsAvx512();
}  // namespace infera::amx
