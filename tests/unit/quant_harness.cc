// Test harness for tests/reference/test_gptq.py: runs src/quant's GPTQ on raw
// little-endian f32 files so the numpy reference can check the result.
//
//   quant_harness gptq TYPE GROUP ACT_ORDER ROWS COLS W.f32 X.f32 TOKENS OUT.f32 OUT.blocks [weighted]
//   quant_harness awq TYPE GRID ROWS COLS W.f32 X.f32 TOKENS OUT.f32
//   quant_harness smooth ALPHA ROWS COLS W.f32 X.f32 TOKENS OUT.f32
//   quant_harness rtn TYPE ROWS COLS W.f32 X.f32 TOKENS OUT.f32 OUT.blocks
//
// X [TOKENS, COLS] are the calibration inputs. gptq: OUT.f32 [ROWS, COLS] the
// dequantized weights, OUT.blocks the GGUF blocks of TYPE. awq: OUT.f32 the
// scales [COLS], then alpha, the loss and the plain-rounding loss. smooth:
// OUT.f32 SmoothQuant's factors [COLS] from X's per-channel |x| maxima (as
// prune::InputStats records them), then the W8A8 rows of W diag(s)
// dequantized [ROWS, COLS]. rtn: TYPE's importance-weighted rounding
// (QuantizeRow with X's per-column sum of x^2, scaled to mean 1, as the
// imatrix; TOKENS 0: the plain rounding, no imatrix), outputs as gptq.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "unit/harness_io.h"

#include "prune/input_stats.h"
#include "quant/awq.h"
#include "quant/gptq.h"
#include "quant/quantize.h"
#include "quant/smoothquant.h"
#include "tensor/quant_blocks.h"

using infera::testing::ReadF32;
using infera::testing::WriteBytes;

int Awq(int argc, char** argv) {
  using namespace infera;
  if (argc != 10) return 2;
  auto t = ParseDTypeName(argv[2]);
  if (!t) return 2;
  const int grid = std::atoi(argv[3]);
  const int64_t rows = std::atoll(argv[4]), cols = std::atoll(argv[5]), tokens = std::atoll(argv[8]);
  std::vector<float> w = ReadF32(argv[6], rows * cols), x = ReadF32(argv[7], tokens * cols);
  prune::InputStats stats(cols, true);
  stats.Add(x.data(), tokens);
  auto r = AwqSearch({{w.data(), rows, *t}}, stats.hessian(), cols, grid, 2);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    return 2;
  }
  std::vector<float> out = r->scales;
  out.push_back(static_cast<float>(r->alpha));
  out.push_back(static_cast<float>(r->loss));
  out.push_back(static_cast<float>(r->loss_plain));
  return WriteBytes(argv[9], out.data(), out.size() * 4) ? 0 : 1;
}

int Smooth(int argc, char** argv) {
  using namespace infera;
  if (argc != 9) return 2;
  const double alpha = std::atof(argv[2]);
  const int64_t rows = std::atoll(argv[3]), cols = std::atoll(argv[4]), tokens = std::atoll(argv[7]);
  std::vector<float> w = ReadF32(argv[5], rows * cols), x = ReadF32(argv[6], tokens * cols);
  prune::InputStats stats(cols, false);
  stats.Add(x.data(), tokens);
  std::vector<float> out = SmoothQuantScales(stats.abs_max(), {{w.data(), rows}}, cols, alpha);
  std::vector<uint8_t> q(*RowBytes(DType::kW8A8, cols));
  std::vector<float> row(cols), back(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) row[j] = w[r * cols + j] * out[j];
    QuantizeRow(DType::kW8A8, row.data(), q.data(), cols);
    DequantizeRow(DType::kW8A8, q.data(), back.data(), cols);
    out.insert(out.end(), back.begin(), back.end());
  }
  return WriteBytes(argv[8], out.data(), out.size() * 4) ? 0 : 1;
}

int Rtn(int argc, char** argv) {
  using namespace infera;
  if (argc != 10) return 2;
  auto t = ParseDTypeName(argv[2]);
  if (!t || !RowBytes(*t, std::atoll(argv[4]))) return 2;
  const int64_t rows = std::atoll(argv[3]), cols = std::atoll(argv[4]), tokens = std::atoll(argv[7]);
  std::vector<float> w = ReadF32(argv[5], rows * cols), x = ReadF32(argv[6], tokens * cols);
  // Per-column sum of x^2 scaled to mean 1, as GPTQ gives its block
  // quantizers (the weighted quantizers are scale-free up to rounding).
  std::vector<double> sum2(cols);
  double mean = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < cols; ++j) sum2[j] += static_cast<double>(x[i * cols + j]) * x[i * cols + j];
  }
  for (int64_t j = 0; j < cols; ++j) mean += sum2[j] / static_cast<double>(cols);
  std::vector<float> importance(cols);
  for (int64_t j = 0; j < cols; ++j) importance[j] = static_cast<float>(sum2[j] / mean);
  const uint64_t row_bytes = *RowBytes(*t, cols);
  std::vector<uint8_t> blocks(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(*t, &w[r * cols], &blocks[r * row_bytes], cols, tokens > 0 ? importance.data() : nullptr);
    DequantizeRow(*t, &blocks[r * row_bytes], &w[r * cols], cols);
  }
  return WriteBytes(argv[8], w.data(), w.size() * 4) && WriteBytes(argv[9], blocks.data(), blocks.size()) ? 0 : 1;
}

int main(int argc, char** argv) {
  using namespace infera;
  if (argc > 1 && std::string(argv[1]) == "awq") return Awq(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "smooth") return Smooth(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "rtn") return Rtn(argc, argv);
  if ((argc != 12 && argc != 13) || std::string(argv[1]) != "gptq") {
    std::fprintf(stderr, "usage: quant_harness gptq TYPE GROUP ACT_ORDER ROWS COLS W X TOKENS OUT.f32 OUT.blocks "
                 "[weighted]\n");
    return 2;
  }
  GptqOptions o;
  auto t = ParseDTypeName(argv[2]);
  if (!t) return 2;
  o.type = *t;
  o.group = std::atoi(argv[3]);
  o.act_order = std::atoi(argv[4]) != 0;
  o.weighted_scales = argc == 13 && std::string(argv[12]) == "weighted";
  const int64_t rows = std::atoll(argv[5]), cols = std::atoll(argv[6]), tokens = std::atoll(argv[9]);
  std::vector<float> w = ReadF32(argv[7], rows * cols), x = ReadF32(argv[8], tokens * cols);
  prune::InputStats stats(cols, true);
  stats.Add(x.data(), tokens);
  std::vector<uint8_t> blocks(*RowBytes(o.type, cols) * rows);
  if (auto st = Gptq(w.data(), rows, cols, stats.hessian(), o, blocks.data(), 2); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 2;
  }
  return WriteBytes(argv[10], w.data(), w.size() * 4) && WriteBytes(argv[11], blocks.data(), blocks.size()) ? 0 : 1;
}
