// CPU feature detection (cpuid + OS support), read once at start-up.
#pragma once

#include <string>

namespace infera {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512vbmi = false, avx512vbmi2 = false, avx512bf16 = false;
  bool avx_vnni = false;  // 256-bit VNNI (VEX), e.g. Alder Lake

  // The best ISA level infera has kernels for on this CPU.
  CpuIsa BestIsa() const;
  std::string ToString() const;
};

CpuFeatures DetectCpuFeatures();
const char* CpuIsaName(CpuIsa isa);
bool ParseCpuIsa(const std::string& name, CpuIsa* out);
std::string CpuModelName();

}  // namespace infera
