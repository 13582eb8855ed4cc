// Raw little-endian f32 file I/O for the test harnesses that the numpy
// references drive (prune_harness, quant_harness). Exits with status 2 on a
// short read, as the harnesses report bad input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace infera::testing {

inline std::vector<float> ReadF32(const char* path, size_t n) {
  std::vector<float> v(n);
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr || std::fread(v.data(), sizeof(float), n, f) != n) {
    std::fprintf(stderr, "cannot read %zu floats from %s\n", n, path);
    std::exit(2);
  }
  std::fclose(f);
  return v;
}

inline bool WriteBytes(const char* path, const void* data, size_t n) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

}  // namespace infera::testing
