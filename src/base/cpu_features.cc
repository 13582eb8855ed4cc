#include "base/cpu_features.h"

#include <cstdint>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace infera {

namespace {

#if defined(__x86_64__) && defined(__linux__)
constexpr long kArchGetXcompSupp = 0x1021;  // asm/prctl.h
constexpr long kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// Whether the OS supports AMX tile data: tile state enabled in XCR0 (bits 17
// XTILECFG and 18 XTILEDATA) and XTILEDATA among the dynamic features Linux
// (5.16+) can grant. Asks for nothing.
bool OsSupportsAmx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || ((ecx >> 27) & 1) == 0) return false;  // OSXSAVE
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
  uint64_t supported = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompSupp, &supported) == 0 && ((supported >> kXfeatureXtiledata) & 1) != 0;
}
#endif

}  // namespace

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
#if defined(__x86_64__) && defined(__linux__)
  // AMX: CPUID.(EAX=7, ECX=0):EDX bits 22 (AMX-BF16), 24 (AMX-TILE), 25
  // (AMX-INT8).
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && ((edx >> 24) & 1) != 0 && OsSupportsAmx()) {
    f.amx_tile = true;
    f.amx_int8 = ((edx >> 25) & 1) != 0;
    f.amx_bf16 = ((edx >> 22) & 1) != 0;
  }
#endif
#endif
  return f;
}

bool RequestAmxTileData() {
#if defined(__x86_64__) && defined(__linux__)
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuIsa CpuFeatures::MaxIsa() const {
  const CpuIsa best = BestIsa();
  if (best == CpuIsa::kAvx512 && avx512vnni && amx_tile && amx_int8) return CpuIsa::kAmx;
  return best;
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
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "none" : s;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

bool ParseCpuIsa(const std::string& name, CpuIsa* out) {
  if (name == "scalar") *out = CpuIsa::kScalar;
  else if (name == "avx2") *out = CpuIsa::kAvx2;
  else if (name == "avx512") *out = CpuIsa::kAvx512;
  else if (name == "amx") *out = CpuIsa::kAmx;
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
