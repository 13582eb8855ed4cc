// Test harness for tests/reference/test_prune.py: runs one pruning method of
// src/prune on raw little-endian f32 files so the numpy reference can check
// masks and weights.
//
//   prune_harness METHOD ROWS COLS SPARSITY PATTERN W.f32 X.f32 TOKENS OUT.f32
//
// METHOD: magnitude | wanda | sparsegpt; X [TOKENS, COLS] (ignored for
// magnitude); OUT [ROWS, COLS].
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "prune/input_stats.h"
#include "prune/sparsity.h"

namespace {

std::vector<float> ReadF32(const char* path, size_t n) {
  std::vector<float> v(n);
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr || std::fread(v.data(), sizeof(float), n, f) != n) {
    std::fprintf(stderr, "cannot read %zu floats from %s\n", n, path);
    std::exit(2);
  }
  std::fclose(f);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace infera::prune;
  if (argc != 10) {
    std::fprintf(stderr, "usage: prune_harness METHOD ROWS COLS SPARSITY PATTERN W X TOKENS OUT\n");
    return 2;
  }
  const std::string method = argv[1];
  const int64_t rows = std::atoll(argv[2]), cols = std::atoll(argv[3]), tokens = std::atoll(argv[8]);
  const double sparsity = std::atof(argv[4]);
  auto pattern = ParsePattern(argv[5]);
  if (!pattern.ok()) {
    std::fprintf(stderr, "%s\n", pattern.status().message().c_str());
    return 2;
  }
  std::vector<float> w = ReadF32(argv[6], rows * cols);
  if (auto st = CheckShape(cols, sparsity, *pattern); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 2;
  }
  InputStats stats(cols, method == "sparsegpt");
  if (method != "magnitude") {
    std::vector<float> x = ReadF32(argv[7], tokens * cols);
    stats.Add(x.data(), tokens);
  }
  if (method == "sparsegpt") {
    SparseGptOptions o;
    o.sparsity = sparsity;
    o.pattern = *pattern;
    if (auto st = SparseGpt(w.data(), rows, cols, stats.hessian(), o, 2); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 2;
    }
  } else {
    const auto s = WeightScores(w.data(), rows, cols, method == "wanda" ? stats.sq_norm().data() : nullptr);
    PruneByScore(w.data(), s.data(), rows, cols, sparsity, *pattern);
  }
  FILE* f = std::fopen(argv[9], "wb");
  if (f == nullptr || std::fwrite(w.data(), sizeof(float), w.size(), f) != w.size()) return 1;
  std::fclose(f);
  return 0;
}
