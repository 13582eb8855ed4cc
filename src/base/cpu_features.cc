#include "base/cpu_features.h"

#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace infera {

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = true;  // every AVX2 CPU has F16C; checked together with avx2 below
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512vbmi2 = __builtin_cpu_supports("avx512vbmi2");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  // AVX-VNNI: CPUID.(EAX=7, ECX=1):EAX bit 4 (read directly: not every
  // compiler's __builtin_cpu_supports knows it); its registers are AVX's,
  // whose OS support the avx2 check above covers.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.avx_vnni = f.avx2 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && ((eax >> 4) & 1) != 0;
#endif
  return f;
}

CpuIsa CpuFeatures::BestIsa() const {
  if (avx512f && avx512bw && avx512vl && avx512dq && fma) return CpuIsa::kAvx512;
  if (avx2 && fma && f16c) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&](bool b, const char* n) {
    if (!b) return;
    if (!s.empty()) s += ' ';
    s += n;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vnni, "avx512vnni");
  add(avx512vbmi, "avx512vbmi");
  add(avx512vbmi2, "avx512vbmi2");
  add(avx512bf16, "avx512bf16");
  add(avx_vnni, "avx_vnni");
  return s.empty() ? "none" : s;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool ParseCpuIsa(const std::string& name, CpuIsa* out) {
  if (name == "scalar") *out = CpuIsa::kScalar;
  else if (name == "avx2") *out = CpuIsa::kAvx2;
  else if (name == "avx512") *out = CpuIsa::kAvx512;
  else return false;
  return true;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

}  // namespace infera
