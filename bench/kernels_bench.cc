// Matmul throughput per ISA and weight type (Google Benchmark).
//   build/bench/kernels_bench --benchmark_filter=Decode
// Decode: one token (M = 1), bandwidth-bound. Prefill: M = 64, compute-bound.
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/kernels.h"
#include "tensor/fp16.h"

namespace infera {
namespace {

void RunMatmul(benchmark::State& state, CpuIsa isa, DType type, int64_t m) {
  if (static_cast<int>(isa) > static_cast<int>(DetectCpuFeatures().BestIsa())) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const int64_t n_in = state.range(0), n_out = state.range(1);
  const size_t esz = type == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> w(n_in * n_out * esz);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 0.02f);
  for (int64_t i = 0; i < n_in * n_out; ++i) {
    const float x = d(rng);
    if (type == DType::kF32) std::memcpy(&w[i * 4], &x, 4);
    else {
      const uint16_t h = type == DType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
      std::memcpy(&w[i * 2], &h, 2);
    }
  }
  std::vector<float> x(m * n_in, 0.5f), y(m * n_out);
  const KernelTable k = MakeKernelTable(isa);
  ThreadPool pool(static_cast<int>(state.range(2)));
  WeightMatrix W{type, n_in, n_out, w.data(), static_cast<size_t>(n_in * esz)};
  for (auto _ : state) {
    Matmul(k, pool, W, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n_in * n_out * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}

#define MATMUL_BENCH(ISA, TYPE, M, NAME)                                                      \
  void NAME(benchmark::State& s) { RunMatmul(s, CpuIsa::ISA, DType::TYPE, M); }              \
  BENCHMARK(NAME)->Args({960, 2560, 1})->Args({960, 2560, 2})->Args({2048, 5632, 2})->UseRealTime()

MATMUL_BENCH(kScalar, kF32, 1, Decode_Scalar_F32);
MATMUL_BENCH(kAvx2, kF32, 1, Decode_Avx2_F32);
MATMUL_BENCH(kAvx512, kF32, 1, Decode_Avx512_F32);
MATMUL_BENCH(kAvx2, kF16, 1, Decode_Avx2_F16);
MATMUL_BENCH(kAvx512, kF16, 1, Decode_Avx512_F16);
MATMUL_BENCH(kAvx512, kBF16, 1, Decode_Avx512_BF16);
MATMUL_BENCH(kAvx512, kF32, 64, Prefill64_Avx512_F32);
MATMUL_BENCH(kAvx512, kF16, 64, Prefill64_Avx512_F16);

}  // namespace
}  // namespace infera

BENCHMARK_MAIN();
