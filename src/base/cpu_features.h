// CPU feature detection (cpuid + OS support), read once at start-up.
#pragma once

#include <string>

namespace infera {

// Levels in order: each includes the ones before it. kAmx is AVX-512 plus
// the AMX-INT8 tile unit (prefill's quantized matmuls).
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512vbmi = false, avx512vbmi2 = false, avx512bf16 = false;
  bool avx_vnni = false;  // 256-bit VNNI (VEX), e.g. Alder Lake
  // AMX (Sapphire Rapids and later): set only when cpuid reports the unit,
  // the OS enables its state (XCR0 bits 17-18) and Linux can grant the
  // tile-data permission (RequestAmxTileData; detection asks for nothing).
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;

  // The level infera runs by default: the best one whose kernels pay end to
  // end. AMX only on request (--cpu-isa amx): its tile kernel was faster in
  // kernels_bench but not in end-to-end prefill (performance.md, Stage 8
  // thirteenth part).
  CpuIsa BestIsa() const;
  // The highest level this CPU can run (what --cpu-isa accepts).
  CpuIsa MaxIsa() const;
  std::string ToString() const;
};

CpuFeatures DetectCpuFeatures();
// Asks Linux for this process's AMX tile-data permission (arch_prctl
// ARCH_REQ_XCOMP_PERM: process-wide, idempotent; without it the first tile
// instruction faults). Only when the AMX level is chosen (MakeKernelTable):
// granted, it enlarges every signal frame of the process. False where it
// is refused (or not Linux x86-64).
bool RequestAmxTileData();
const char* CpuIsaName(CpuIsa isa);
bool ParseCpuIsa(const std::string& name, CpuIsa* out);
std::string CpuModelName();

}  // namespace infera
