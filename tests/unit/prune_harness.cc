// Test harness for tests/reference/test_prune.py: runs one pruning method of
// src/prune on raw little-endian f32 files so the numpy reference can check
// masks and weights.
//
//   prune_harness METHOD ROWS COLS SPARSITY PATTERN W.f32 X.f32 TOKENS OUT.f32
//
// METHOD: magnitude | wanda | sparsegpt | sparsegpt-auto; X [TOKENS, COLS]
// (ignored for magnitude); OUT [ROWS, COLS]. sparsegpt-auto is `--damp
// auto`: the damping is chosen with the Hessian of X's even rows, scored on
// the odd rows, then W is pruned with all of X; it prints "damp D" and the
// candidates' errors to stdout.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "unit/harness_io.h"

#include "prune/damp_selection.h"
#include "prune/input_stats.h"
#include "prune/sparsity.h"

using infera::testing::ReadF32;
using infera::testing::WriteBytes;

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
  if (method == "sparsegpt-auto") {
    const std::vector<float> x = ReadF32(argv[7], tokens * cols);
    InputStats fit(cols, true), check(cols, true);
    for (int64_t t = 0; t < tokens; ++t) (t % 2 ? check : fit).Add(&x[t * cols], 1);
    SparseGptOptions o;
    o.sparsity = sparsity;
    o.pattern = *pattern;
    auto choice = ChooseSparseGptDamp(w.data(), rows, cols, fit.hessian(), check.hessian(), o, AutoDampCandidates(), 2);
    if (!choice.ok()) {
      std::fprintf(stderr, "%s\n", choice.status().message().c_str());
      return 2;
    }
    std::printf("damp %.17g\nerrors", choice->damp);
    for (double e : choice->errors) std::printf(" %.17g", e);
    std::printf("\n");
    o.damp = choice->damp;
    stats = InputStats(cols, true);
    stats.Add(x.data(), tokens);
    if (auto st = SparseGpt(w.data(), rows, cols, stats.hessian(), o, 2); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 2;
    }
    return WriteBytes(argv[9], w.data(), w.size() * sizeof(float)) ? 0 : 1;
  }
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
  return WriteBytes(argv[9], w.data(), w.size() * sizeof(float)) ? 0 : 1;
}
