// Matmul throughput per ISA and weight type (Google Benchmark).
//   build/bench/kernels_bench --benchmark_filter=Decode
// Decode: one token (M = 1), bandwidth-bound. Prefill: M = 64, compute-bound.
// Verify9: M = 9, in between.
// Args: n_in, n_out, threads (4096 x 16384: beyond the L3 cache).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "base/thread_pool.h"
#include "kernels/bf16_generic.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/flash.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "model/decoder.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

// Random weights W [n_out, n_in] of `type` (rows of RowBytes), inputs
// x [m, n_in] and outputs y [m, n_out].
void RandomProblem(DType type, int64_t n_in, int64_t n_out, int64_t m, std::vector<uint8_t>* w,
                   std::vector<float>* x, std::vector<float>* y) {
  const size_t row_bytes = *RowBytes(type, n_in);
  w->assign(row_bytes * n_out, 0);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 0.02f);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    for (auto& v : row) v = d(rng);
    QuantizeRow(type, row.data(), w->data() + r * row_bytes, n_in);
  }
  x->resize(m * n_in);
  y->resize(m * n_out);
  for (auto& v : *x) v = d(rng);
}

// bf16: bf16 products in the float matmuls (--matmul-dtype bf16).
void RunMatmul(benchmark::State& state, CpuIsa isa, DType type, int64_t m, bool bf16 = false) {
  if (static_cast<int>(isa) > static_cast<int>(DetectCpuFeatures().MaxIsa())) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const int64_t n_in = state.range(0), n_out = state.range(1);
  if (!RowBytes(type, n_in).has_value()) {  // e.g. K-quants (256-element blocks) at n_in 960
    state.SkipWithError("n_in is not a whole number of this type's blocks");
    return;
  }
  const size_t row_bytes = *RowBytes(type, n_in);
  std::vector<uint8_t> w;
  std::vector<float> x, y;
  RandomProblem(type, n_in, n_out, m, &w, &x, &y);
  KernelTable k = MakeKernelTable(isa);
  k.matmul_bf16 = bf16;
  if (bf16 && isa == CpuIsa::kAmx && k.bf16_tile_rows == nullptr) {
    state.SkipWithError("no AMX-BF16 here");
    return;
  }
  ThreadPool pool(static_cast<int>(state.range(2)));
  WeightMatrix W{type, n_in, n_out, w.data(), row_bytes};
  std::unique_ptr<PackedMatrix> packed;
  if (GetPackFormat(type).supported) {
    packed = std::make_unique<PackedMatrix>(PackedMatrix::Pack(type, w.data(), row_bytes, n_in, n_out));
    W.packed = packed.get();  // as the model loader does
  }
  for (auto _ : state) {
    Matmul(k, pool, W, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n_in * n_out * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}

#define MATMUL_BENCH(ISA, TYPE, M, NAME)                                        \
  void NAME(benchmark::State& s) { RunMatmul(s, CpuIsa::ISA, DType::TYPE, M); } \
  BENCHMARK(NAME)                                                               \
      ->Args({960, 2560, 1})                                                    \
      ->Args({960, 2560, 2})                                                    \
      ->Args({2048, 5632, 2})                                                   \
      ->Args({4096, 16384, 1})                                                  \
      ->Args({4096, 16384, 2})                                                  \
      ->UseRealTime()

MATMUL_BENCH(kScalar, kF32, 1, Decode_Scalar_F32);
MATMUL_BENCH(kAvx2, kF32, 1, Decode_Avx2_F32);
MATMUL_BENCH(kAvx512, kF32, 1, Decode_Avx512_F32);
MATMUL_BENCH(kAvx2, kF16, 1, Decode_Avx2_F16);
MATMUL_BENCH(kAvx512, kF16, 1, Decode_Avx512_F16);
MATMUL_BENCH(kAvx512, kBF16, 1, Decode_Avx512_BF16);
MATMUL_BENCH(kAvx2, kQ8_0, 1, Decode_Avx2_Q8_0);
MATMUL_BENCH(kAvx512, kQ8_0, 1, Decode_Avx512_Q8_0);
MATMUL_BENCH(kAvx512, kQ4_0, 1, Decode_Avx512_Q4_0);
MATMUL_BENCH(kAvx512, kQ4_K, 1, Decode_Avx512_Q4_K);
MATMUL_BENCH(kAvx512, kQ6_K, 1, Decode_Avx512_Q6_K);
MATMUL_BENCH(kAvx512, kF32, 64, Prefill64_Avx512_F32);
MATMUL_BENCH(kAvx512, kF16, 64, Prefill64_Avx512_F16);
MATMUL_BENCH(kAvx512, kQ8_0, 64, Prefill64_Avx512_Q8_0);
MATMUL_BENCH(kAvx512, kQ4_0, 64, Prefill64_Avx512_Q4_0);
MATMUL_BENCH(kAvx512, kQ4_K, 64, Prefill64_Avx512_Q4_K);
MATMUL_BENCH(kAvx512, kQ6_K, 64, Prefill64_Avx512_Q6_K);
// Small matmuls from cache (a draft model's, a 3 M-parameter model's): one
// thread, two threads splitting every op, and two threads with the split size
// of a model that runs from cache (DecoderRunner::kCacheResidentMinSplitBytes:
// ops below it run inline), F16 and Q4_0. Args: n_in, n_out, threads, split
// (0: that size, 1: every op splits), tokens (1: decode, 9: verifying 8
// drafted tokens). Where 2 threads splitting is slower than 1 thread, the op is
// below the hand-off's break-even.
void SmallDecodeSplit(benchmark::State& state, DType type) {
  const int64_t n_in = state.range(0), n_out = state.range(1), m = state.range(4);
  std::vector<uint8_t> w;
  std::vector<float> x, y;
  RandomProblem(type, n_in, n_out, m, &w, &x, &y);
  KernelTable k = MakeBestKernelTable();
  k.min_split_bytes = state.range(3) != 0 ? 0 : DecoderRunner::kCacheResidentMinSplitBytes;
  ThreadPool pool(static_cast<int>(state.range(2)));
  WeightMatrix W{type, n_in, n_out, w.data(), *RowBytes(type, n_in)};
  std::unique_ptr<PackedMatrix> packed;
  if (GetPackFormat(type).supported) {
    packed = std::make_unique<PackedMatrix>(PackedMatrix::Pack(type, w.data(), W.row_bytes, n_in, n_out));
    W.packed = packed.get();
  }
  for (auto _ : state) {
    Matmul(k, pool, W, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
}
void SmallDecodeSplitArgs(benchmark::internal::Benchmark* b) {
  for (int m : {1, 9}) {
    for (const auto& shape : {std::pair{128, 384}, {256, 512}, {256, 1024}, {256, 1536}, {512, 1024}, {1024, 1024}}) {
      b->Args({shape.first, shape.second, 1, 0, m})->Args({shape.first, shape.second, 2, 1, m});
      b->Args({shape.first, shape.second, 2, 0, m});
    }
  }
  b->UseRealTime();
}
void SmallDecodeSplit_F16(benchmark::State& s) { SmallDecodeSplit(s, DType::kF16); }
void SmallDecodeSplit_Q4_0(benchmark::State& s) { SmallDecodeSplit(s, DType::kQ4_0); }
BENCHMARK(SmallDecodeSplit_F16)->Apply(SmallDecodeSplitArgs);
BENCHMARK(SmallDecodeSplit_Q4_0)->Apply(SmallDecodeSplitArgs);

// The AMX-INT8 tile kernel (qgemm_tile16; skipped where the CPU has none).
MATMUL_BENCH(kAmx, kQ8_0, 64, Prefill64_Amx_Q8_0);
MATMUL_BENCH(kAmx, kQ4_0, 64, Prefill64_Amx_Q4_0);
MATMUL_BENCH(kAmx, kQ4_K, 64, Prefill64_Amx_Q4_K);
MATMUL_BENCH(kAmx, kQ6_K, 64, Prefill64_Amx_Q6_K);
// bf16 products (--matmul-dtype bf16): AVX512-BF16's 16-lane form, and the
// AMX-BF16 tile form (skipped where the CPU has none).
#define MATMUL_BF16_BENCH(ISA, TYPE, M, NAME)                                         \
  void NAME(benchmark::State& s) { RunMatmul(s, CpuIsa::ISA, DType::TYPE, M, true); } \
  BENCHMARK(NAME)->Args({960, 2560, 1})->Args({2048, 5632, 1})->Args({2048, 5632, 2})->UseRealTime()
MATMUL_BF16_BENCH(kAvx512, kF16, 1, Decode_Avx512Bf16_F16);
MATMUL_BF16_BENCH(kAvx512, kF16, 64, Prefill64_Avx512Bf16_F16);
MATMUL_BF16_BENCH(kAmx, kF16, 1, Decode_AmxBf16_F16);
MATMUL_BF16_BENCH(kAmx, kF16, 64, Prefill64_AmxBf16_F16);
// The AMX-BF16 kernel's conversion of F16 rows to bf16 alone (the tile
// kernel with no tokens: AVX-512 work, measurable without AMX), one
// thread; bytes = the F16 rows read.
void AmxBf16Convert_F16(benchmark::State& state) {
  if (!DetectCpuFeatures().avx512bf16) {
    state.SkipWithError("no AVX512-BF16 here");
    return;
  }
  const int64_t n_in = state.range(0), n_out = state.range(1);
  std::vector<uint8_t> w;
  std::vector<float> x, y;
  RandomProblem(DType::kF16, n_in, n_out, 0, &w, &x, &y);
  const Bf16TileRowsFn convert = amx::Bf16TileRowsEmulated();
  for (auto _ : state) {
    for (int64_t r = 0; r < n_out; r += kBf16TileRows) {
      convert(DType::kF16, w.data() + r * 2 * n_in, 2 * n_in, kBf16TileRows, nullptr, n_in, 0, n_in, nullptr, 0);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
}
BENCHMARK(AmxBf16Convert_F16)->Args({960, 2560})->Args({2048, 5632})->UseRealTime();
// W8A8 (whole-row int8, per-token activations) beside Q8_0: same bytes.
MATMUL_BENCH(kAvx512, kW8A8, 64, Prefill64_Avx512_W8A8);
MATMUL_BENCH(kAvx512, kW8A8, 1, Decode_Avx512_W8A8);
MATMUL_BENCH(kAvx2, kW8A8, 64, Prefill64_Avx2_W8A8);
MATMUL_BENCH(kAvx2, kQ8_0, 64, Prefill64_Avx2_Q8_0);
// The AVX2 level's prefill for the types the comparison tables use (AVX2-only
// CPUs, e.g. Zen 3).
MATMUL_BENCH(kAvx2, kF32, 64, Prefill64_Avx2_F32);
MATMUL_BENCH(kAvx2, kF16, 64, Prefill64_Avx2_F16);
MATMUL_BENCH(kAvx2, kQ4_0, 64, Prefill64_Avx2_Q4_0);
MATMUL_BENCH(kAvx2, kQ4_K, 64, Prefill64_Avx2_Q4_K);
MATMUL_BENCH(kAvx2, kQ6_K, 64, Prefill64_Avx2_Q6_K);
// M = 9: a decode token with 8 drafted tokens to verify (speculative
// decoding), or a small decode batch.
MATMUL_BENCH(kAvx512, kQ8_0, 9, Verify9_Avx512_Q8_0);
MATMUL_BENCH(kAvx512, kQ4_0, 9, Verify9_Avx512_Q4_0);
MATMUL_BENCH(kAvx512, kQ4_K, 9, Verify9_Avx512_Q4_K);

// Decode through a model's layer matrices in turn, as a decode step reads
// them: each matrix once per pass, the whole set far beyond the L3 cache, so
// every call starts cold. DecodeLayers: Args n_embd, n_ff, kv_dim, layers,
// threads (q, k, v, o, gate, up, down per layer; m1b: 2048, 5632, 256, 22).
// DecodeLong: the same bytes in one matrix, Args n_in, n_out, threads: what
// a long stream reaches, against which the per-call start-up costs show.
// Bytes: the packed matrices (one layer's raw bytes are packed once per layer).
// Float types run unpacked; bf16: with bf16 products (--matmul-dtype bf16).
void RunDecodeMatrices(benchmark::State& state, DType type, const std::vector<std::pair<int64_t, int64_t>>& shapes,
                       int threads, bool bf16 = false) {
  if (DetectCpuFeatures().MaxIsa() < CpuIsa::kAvx512) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  KernelTable k = MakeKernelTable(CpuIsa::kAvx512);
  k.matmul_bf16 = bf16;
  ThreadPool pool(threads);
  std::vector<std::vector<uint8_t>> raw(shapes.size());
  std::vector<std::unique_ptr<PackedMatrix>> packed(shapes.size());
  std::vector<WeightMatrix> ws;
  std::vector<float> x, y, xi, yi;
  size_t bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n_in, n_out] = shapes[i];
    const size_t row_bytes = *RowBytes(type, n_in);
    // The first matrix of this shape holds the raw bytes.
    const size_t same = static_cast<size_t>(std::find(shapes.begin(), shapes.begin() + i, shapes[i]) - shapes.begin());
    if (same == i) {  // random rows: at most 4,096 of them, repeated (quantizing them all takes minutes)
      const int64_t drawn = std::min<int64_t>(n_out, 4096);
      RandomProblem(type, n_in, drawn, 1, &raw[i], &xi, &yi);
      raw[i].resize(row_bytes * n_out);
      for (int64_t r = drawn; r < n_out; ++r) {
        std::memcpy(raw[i].data() + r * row_bytes, raw[i].data() + (r % drawn) * row_bytes, row_bytes);
      }
    }
    if (same != i && !GetPackFormat(type).supported) raw[i] = raw[same];  // unpacked: a copy of its own
    const std::vector<uint8_t>& w = GetPackFormat(type).supported ? raw[same] : raw[i];
    if (GetPackFormat(type).supported) {
      packed[i] = std::make_unique<PackedMatrix>(PackedMatrix::Pack(type, w.data(), row_bytes, n_in, n_out));
    }
    ws.push_back(WeightMatrix{type, n_in, n_out, w.data(), row_bytes, packed[i].get()});
    bytes += packed[i] != nullptr ? packed[i]->bytes() : row_bytes * n_out;
    if (xi.size() > x.size()) x = xi;
    y.resize(std::max<size_t>(y.size(), n_out));
  }
  for (auto _ : state) {
    for (const WeightMatrix& w : ws) Matmul(k, pool, w, x.data(), 1, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["calls"] = static_cast<double>(ws.size());
}
void DecodeLayers(benchmark::State& state, DType type) {
  const int64_t e = state.range(0), f = state.range(1), kv = state.range(2);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t l = 0; l < state.range(3); ++l) {
    for (auto s : {std::pair{e, e}, {e, kv}, {e, kv}, {e, e}, {e, f}, {e, f}, {f, e}}) shapes.push_back(s);
  }
  RunDecodeMatrices(state, type, shapes, static_cast<int>(state.range(4)));
}
void DecodeLong(benchmark::State& state, DType type) {
  RunDecodeMatrices(state, type, {{state.range(0), state.range(1)}}, static_cast<int>(state.range(2)));
}
#define DECODE_MATRICES_BENCH(TYPE, NAME)                                                                        \
  void DecodeLayers_##NAME(benchmark::State& s) { DecodeLayers(s, DType::TYPE); }                                \
  void DecodeLong_##NAME(benchmark::State& s) { DecodeLong(s, DType::TYPE); }                                    \
  BENCHMARK(DecodeLayers_##NAME)->Args({2048, 5632, 256, 22, 2})->Args({2048, 5632, 256, 22, 1})->UseRealTime(); \
  BENCHMARK(DecodeLong_##NAME)->Args({2048, 22 * 21504, 2})->Args({2048, 22 * 21504, 1})->UseRealTime()
DECODE_MATRICES_BENCH(kQ4_0, Q4_0);
DECODE_MATRICES_BENCH(kQ4_K, Q4_K);
DECODE_MATRICES_BENCH(kQ8_0, Q8_0);
// Float weights through m360's layer shapes (32 layers of 960 x 960 / 320 /
// 2560; 629 MiB at 2 bytes): F16 with f32 products, BF16 with f32 and with
// bf16 products (what --matmul-dtype bf16 stores and runs).
void DecodeLayersM360(benchmark::State& state, DType type, bool bf16) {
  // q, k, v, o, gate, up, down as (n_in, n_out).
  constexpr int64_t kLayer[7][2] = {{960, 960},  {960, 320},  {960, 320}, {960, 960},
                                    {960, 2560}, {960, 2560}, {2560, 960}};
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int l = 0; l < 32; ++l) {
    for (const auto& sh : kLayer) shapes.emplace_back(sh[0], sh[1]);
  }
  RunDecodeMatrices(state, type, shapes, static_cast<int>(state.range(0)), bf16);
}
void DecodeLayersM360_F16(benchmark::State& s) { DecodeLayersM360(s, DType::kF16, false); }
void DecodeLayersM360_BF16(benchmark::State& s) { DecodeLayersM360(s, DType::kBF16, false); }
void DecodeLayersM360_BF16Products(benchmark::State& s) { DecodeLayersM360(s, DType::kBF16, true); }
BENCHMARK(DecodeLayersM360_F16)->Arg(2)->Arg(1)->UseRealTime();
BENCHMARK(DecodeLayersM360_BF16)->Arg(2)->Arg(1)->UseRealTime();
BENCHMARK(DecodeLayersM360_BF16Products)->Arg(2)->Arg(1)->UseRealTime();

// 2:4 sparse weights (Q8_0_S24 / Q4_0_S24: QuantizeRow keeps the two
// largest of each 4-group), packed sparse (the AVX-512 VNNI kernels skip
// the zeros) or dense (the Q8_0 / Q4_0 they stand for): the sparse kernels'
// cost in and out of cache. Bytes: those of the packed matrix.
void RunSparse24(benchmark::State& state, DType type, bool sparse, int64_t m) {
  const CpuFeatures f = DetectCpuFeatures();
  if (f.BestIsa() < CpuIsa::kAvx512 || !f.avx512vnni) {
    state.SkipWithError("no AVX-512 VNNI here (the only sparse 2:4 kernels)");
    return;
  }
  const KernelTable k = MakeKernelTable(CpuIsa::kAvx512);
  const int64_t n_in = state.range(0), n_out = state.range(1);
  const size_t row_bytes = *RowBytes(type, n_in);
  std::vector<uint8_t> w;
  std::vector<float> x, y;
  RandomProblem(type, n_in, n_out, m, &w, &x, &y);
  ThreadPool pool(static_cast<int>(state.range(2)));
  const PackedMatrix packed =
      PackedMatrix::Pack(type, w.data(), row_bytes, n_in, n_out, sparse ? SparseLayout::k24 : SparseLayout::kDense);
  const WeightMatrix W{type, n_in, n_out, w.data(), row_bytes, &packed};
  for (auto _ : state) {
    Matmul(k, pool, W, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(packed.bytes()));
}

#define SPARSE24_BENCH(TYPE, SPARSE, M, NAME)                                              \
  void NAME(benchmark::State& s) { RunSparse24(s, DType::TYPE, SPARSE, M); }              \
  BENCHMARK(NAME)->Args({2048, 5632, 2})->Args({4096, 16384, 1})->Args({4096, 16384, 2})->UseRealTime()

SPARSE24_BENCH(kQ4_0S24, false, 1, Sparse24Decode_Q4_0_Dense);
SPARSE24_BENCH(kQ4_0S24, true, 1, Sparse24Decode_Q4_0_Sparse);
SPARSE24_BENCH(kQ8_0S24, false, 1, Sparse24Decode_Q8_0_Dense);
SPARSE24_BENCH(kQ8_0S24, true, 1, Sparse24Decode_Q8_0_Sparse);
SPARSE24_BENCH(kQ4_0S24, false, 64, Sparse24Prefill64_Q4_0_Dense);
SPARSE24_BENCH(kQ4_0S24, true, 64, Sparse24Prefill64_Q4_0_Sparse);

// Attention over N cached positions of one m360 KV group (3 query heads,
// head_dim 64, kv_dim 320) in a paged layout: one decode query (naive
// reference vs tiled), and prefill blocks of 10 and 32 consecutive queries
// (30 and 96 rows) at the end of the context (tiled; per query it reads each K/V row
// once per block instead of once per query).
// bf16: bf16 products over the f32 cache (--attn-dtype bf16); bf16_cache:
// the bf16 cache of the same values (--kv-cache-type bf16); q8_cache: int8
// K/V with a scale per slot (--kv-cache-type q8).
void RunAttention(benchmark::State& state, bool flash, int nq, bool bf16 = false, bool bf16_cache = false,
                  bool q8_cache = false, CpuIsa isa = CpuIsa::kAmx) {
  const int32_t n = static_cast<int32_t>(state.range(0));
  const int g = 3, hd = 64;
  const int64_t stride = hd;  // one KV head's cache (random values: K's tiled layout needs no care)
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> kc(static_cast<size_t>(n) * stride), vc(kc.size()), q(size_t(nq) * g * hd), out(q.size());
  for (auto& x : kc) x = d(rng);
  for (auto& x : vc) x = d(rng);
  for (auto& x : q) x = 0.3f * d(rng);
  std::vector<int32_t> slots(n), first(nq, 0), last(nq);
  for (int32_t i = 0; i < n; ++i) slots[i] = i;
  for (int i = 0; i < nq; ++i) last[i] = n - nq + i;
  FlashBlock b;
  b.q = q.data();
  b.q_stride = int64_t(g) * hd;
  b.nq = nq;
  b.g = g;
  b.head_dim = hd;
  b.first = first.data();
  b.last = last.data();
  b.slots = slots.data();
  if (!bf16_cache && !q8_cache) {
    b.k = kc.data();
    b.v = vc.data();
  }
  std::vector<uint16_t> k16v, v16v;  // 64-byte aligned within (as KvStorage's pages are)
  if (bf16_cache) {
    const size_t elems = size_t(n) * FlashHead16Elems(hd);
    k16v.assign(elems + 32, 0);
    v16v.assign(elems + 32, 0);
    auto aligned = [](std::vector<uint16_t>& v) {
      return reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
    };
    uint16_t* k16 = aligned(k16v);
    uint16_t* v16 = aligned(v16v);
    for (int32_t s = 0; s < n; ++s) {
      for (int d = 0; d < hd; ++d) {
        k16[FlashK16Index(s, d, hd)] = Bf16Round(kc[size_t(s) * hd + d]);
        v16[FlashV16Index(s, d, hd)] = Bf16Round(vc[size_t(s) * hd + d]);
      }
    }
    b.k16 = k16;
    b.v16 = v16;
  }
  std::vector<int8_t> k8(q8_cache ? kc.size() : 0), v8(k8.size());
  std::vector<float> ks(q8_cache ? n : 0), vs(ks.size());
  if (q8_cache) {
    for (size_t i = 0; i < k8.size(); ++i) {
      k8[i] = static_cast<int8_t>(std::clamp(std::lround(kc[i] * 40), -127L, 127L));
      v8[i] = static_cast<int8_t>(std::clamp(std::lround(vc[i] * 40), -127L, 127L));
    }
    std::fill(ks.begin(), ks.end(), 1.0f / 40);
    std::fill(vs.begin(), vs.end(), 1.0f / 40);
    b.k8 = k8.data();
    b.v8 = v8.data();
    b.ks = ks.data();
    b.vs = vs.data();
  }
  b.scale = 0.125f;
  std::vector<float> scratch(flash ? FlashBlockScratchFloats(b.rows(), hd) : n);
  KernelTable k = MakeKernelTable(isa);  // (clamped to what the CPU has)
  k.attn_bf16 = bf16;
  for (auto _ : state) {
    if (flash) {
      FlashAttendBlock(k, b, out.data(), b.q_stride, scratch.data());
    } else {
      for (int h = 0; h < g; ++h) {
        k.attend_head(q.data() + h * hd, kc.data(), vc.data(), stride, hd, 0.125f, 0.0f, slots.data(), 0, n - 1,
                      scratch.data(), out.data() + h * hd);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Multiply-adds of q·k and p·v for every row and position it sees.
  const double flops = 4.0 * g * hd * (double(n) * nq - nq * (nq - 1) / 2.0);
  state.counters["GFLOPS"] = benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["scratch_bytes"] = static_cast<double>(scratch.size() * sizeof(float));
}
void Attention_Naive(benchmark::State& s) { RunAttention(s, false, 1); }
void Attention_Tiled(benchmark::State& s) { RunAttention(s, true, 1); }
void Attention_TiledBlock10(benchmark::State& s) { RunAttention(s, true, 10); }
void Attention_TiledBlock32(benchmark::State& s) { RunAttention(s, true, 32); }  // a prefill block
// The same with bf16 products (--attn-dtype bf16).
void Attention_TiledBf16(benchmark::State& s) { RunAttention(s, true, 1, true); }
void Attention_TiledBf16Block32(benchmark::State& s) { RunAttention(s, true, 32, true); }
void Attention_TiledBf16Cache(benchmark::State& s) { RunAttention(s, true, 1, true, true); }
void Attention_TiledBf16CacheBlock32(benchmark::State& s) { RunAttention(s, true, 32, true, true); }
void Attention_TiledQ8Cache(benchmark::State& s) { RunAttention(s, true, 1, false, false, true); }
void Attention_TiledQ8CacheBlock32(benchmark::State& s) { RunAttention(s, true, 32, false, false, true); }
// The AVX2 level's kernel (with AVX-VNNI where the CPU has it).
void Attention_TiledQ8Cache_Avx2(benchmark::State& s) { RunAttention(s, true, 1, false, false, true, CpuIsa::kAvx2); }
void Attention_TiledQ8CacheBlock32_Avx2(benchmark::State& s) {
  RunAttention(s, true, 32, false, false, true, CpuIsa::kAvx2);
}
BENCHMARK(Attention_Naive)->Arg(512)->Arg(2048)->Arg(8192)->Arg(16384);
BENCHMARK(Attention_Tiled)->Arg(512)->Arg(2048)->Arg(8192)->Arg(16384)->Arg(131072);
BENCHMARK(Attention_TiledBlock10)->Arg(512)->Arg(2048)->Arg(8192);
BENCHMARK(Attention_TiledBlock32)->Arg(512)->Arg(4096);
BENCHMARK(Attention_TiledBf16)->Arg(512)->Arg(16384);
BENCHMARK(Attention_TiledBf16Block32)->Arg(512)->Arg(4096);
BENCHMARK(Attention_TiledBf16Cache)->Arg(512)->Arg(16384)->Arg(262144);
BENCHMARK(Attention_TiledBf16CacheBlock32)->Arg(512)->Arg(4096);
BENCHMARK(Attention_TiledQ8Cache)->Arg(2048)->Arg(16384)->Arg(262144);
BENCHMARK(Attention_TiledQ8CacheBlock32)->Arg(512)->Arg(4096);
BENCHMARK(Attention_TiledQ8Cache_Avx2)->Arg(2048)->Arg(16384);
BENCHMARK(Attention_TiledQ8CacheBlock32_Avx2)->Arg(4096);

// The core's f32 multiply-add peak: 16 independent chains of 16-lane fused
// multiply-adds (more than latency x throughput on any current x86 core), no
// memory traffic. The roof that compute-bound float prefill is measured
// against (Prefill64_*_F16 GFLOP/s / this).
__attribute__((target("avx512f"), noinline)) float FmaChains(int64_t iters, float fa, float fb) {
  __m512 acc[16];
  const __m512 a = _mm512_set1_ps(fa), b = _mm512_set1_ps(fb);
  for (int c = 0; c < 16; ++c) acc[c] = _mm512_set1_ps(float(c));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  alignas(64) float lanes[16];
  __m512 sum = acc[0];
  for (int c = 1; c < 16; ++c) sum = _mm512_add_ps(sum, acc[c]);
  _mm512_store_ps(lanes, sum);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}
void FmaPeak_Avx512_F32(benchmark::State& state) {
  if (static_cast<int>(DetectCpuFeatures().BestIsa()) < static_cast<int>(CpuIsa::kAvx512)) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  volatile float fa = 0.999f, fb = 1e-3f;  // unknown to the compiler
  for (auto _ : state) benchmark::DoNotOptimize(FmaChains(kIters, fa, fb));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 16 * 16 * kIters * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(FmaPeak_Avx512_F32)->UseRealTime();

// The gated FFN activations over one token's FFN width (Gemma 2 2B's 9216):
// the kernel table's (exp_generic.h, vectorized per ISA) against GELU with
// libm's tanh, one element at a time (what GeluTanhMul was before); and the
// logits' soft-cap (cap 30) likewise, table vs libm.
enum class Gated { kSilu, kGeluTanh, kGeluTanhLibm, kSoftCap, kSoftCapLibm };
template <Gated kAct>
void GatedActivation(benchmark::State& state) {
  const KernelTable k = MakeBestKernelTable();
  constexpr int64_t kN = 9216;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 2);
  std::vector<float> g0(kN), u(kN), g(kN);
  for (auto& x : g0) x = d(rng);
  for (auto& x : u) x = d(rng);
  for (auto _ : state) {
    std::memcpy(g.data(), g0.data(), kN * sizeof(float));
    if constexpr (kAct == Gated::kSilu) {
      k.silu_mul(g.data(), u.data(), kN);
    } else if constexpr (kAct == Gated::kGeluTanh) {
      k.gelu_tanh_mul(g.data(), u.data(), kN);
    } else if constexpr (kAct == Gated::kSoftCap) {
      k.soft_cap(g.data(), kN, 30.0f);
    } else if constexpr (kAct == Gated::kSoftCapLibm) {
      for (float& v : g) v = 30.0f * std::tanh(v / 30.0f);
    } else {
      for (int64_t i = 0; i < kN; ++i) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
      }
    }
    benchmark::DoNotOptimize(g.data());
  }
  state.counters["ns/elem"] = benchmark::Counter(double(kN) * state.iterations(),
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(GatedActivation<Gated::kSilu>)->Name("GatedActivation_Silu");
BENCHMARK(GatedActivation<Gated::kGeluTanh>)->Name("GatedActivation_GeluTanh");
BENCHMARK(GatedActivation<Gated::kGeluTanhLibm>)->Name("GatedActivation_GeluTanhLibm");
BENCHMARK(GatedActivation<Gated::kSoftCap>)->Name("GatedActivation_SoftCap");
BENCHMARK(GatedActivation<Gated::kSoftCapLibm>)->Name("GatedActivation_SoftCapLibm");

// Reading a codebook format's weights (IQ3_S) for vpdpbusd, per 64-byte
// vector of 16 rows x 4 weights (one grid point per row), from data in L2:
// what a kernel reading the file's 9-bit grid indices would pay (the lean
// layout that would bring IQ3_S from 4.375 to 3.5 bits per weight in
// memory) against the packed 4-bit codes it reads now. Gather: the 16 indices
// (a byte + a high bit each) -> vpgatherdd from the 2 KiB grid, the signs
// applied by mask. Table loads: the same with 16 scalar loads (llama.cpp's
// way). Codes: the current layout, a nibble split + vpshufb per vector.
constexpr int kCodebookVectors = 1 << 14;
struct CodebookData {
  std::vector<uint8_t> idx, codes;
  std::vector<uint16_t> high;
  std::vector<uint64_t> signs;
  CodebookData() : idx(16 * kCodebookVectors), codes(32 * kCodebookVectors), high(kCodebookVectors),
                   signs(kCodebookVectors) {
    std::mt19937 rng(7);
    for (auto& x : idx) x = static_cast<uint8_t>(rng());
    for (auto& x : codes) x = static_cast<uint8_t>(rng());
    for (auto& x : high) x = static_cast<uint16_t>(rng());
    for (auto& x : signs) x = (uint64_t{rng()} << 32) | rng();
  }
};
enum class CodebookRead { kGather, kTableLoads, kCodes };
// GCC 12 warns on the intrinsics' own _mm512_undefined_* inside a function
// compiled for another target (a false positive; the kernels' files are
// compiled with the ISA's flags instead).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <CodebookRead kHow>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int CodebookPass(const CodebookData& d) {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  const __m512i act = _mm512_set1_epi32(0x01020304), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  if constexpr (kHow == CodebookRead::kCodes) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq3sU)));
    const __m512i lo = _mm512_set1_epi8(0x0F);
    for (int i = 0; i < kCodebookVectors; i += 2) {
      const __m512i raw = _mm512_loadu_si512(d.codes.data() + 32 * i);
      acc[i & 3] = _mm512_dpbusd_epi32(acc[i & 3], _mm512_shuffle_epi8(table, _mm512_and_si512(raw, lo)), act);
      acc[(i + 1) & 3] = _mm512_dpbusd_epi32(
          acc[(i + 1) & 3], _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo)), act);
    }
  } else {
    for (int i = 0; i < kCodebookVectors; ++i) {
      const uint8_t* q = d.idx.data() + 16 * i;
      __m512i m;
      if constexpr (kHow == CodebookRead::kGather) {
        __m512i ix = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
        ix = _mm512_mask_add_epi32(ix, static_cast<__mmask16>(d.high[i]), ix, _mm512_set1_epi32(256));
        m = _mm512_i32gather_epi32(ix, kIq3sGrid, 4);
      } else {
        alignas(64) uint32_t v[16];
        for (int r = 0; r < 16; ++r) v[r] = kIq3sGrid[q[r] | ((d.high[i] >> r & 1) << 8)];
        m = _mm512_load_si512(v);
      }
      const __m512i u = _mm512_mask_sub_epi8(_mm512_add_epi8(m, bias), d.signs[i], bias, m);  // 128 +- magnitude
      acc[i & 3] = _mm512_dpbusd_epi32(acc[i & 3], u, act);
    }
  }
  return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3])));
}
#pragma GCC diagnostic pop
template <CodebookRead kHow>
void CodebookRead_Iq3s(benchmark::State& state) {
  const CpuFeatures cpu = DetectCpuFeatures();
  if (!cpu.avx512bw || !cpu.avx512vnni) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const CodebookData d;
  for (auto _ : state) benchmark::DoNotOptimize(CodebookPass<kHow>(d));
  state.counters["ns/vector"] = benchmark::Counter(double(kCodebookVectors) * state.iterations(),
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(CodebookRead_Iq3s<CodebookRead::kGather>)->Name("CodebookRead_Iq3s_Gather");
BENCHMARK(CodebookRead_Iq3s<CodebookRead::kTableLoads>)->Name("CodebookRead_Iq3s_TableLoads");
BENCHMARK(CodebookRead_Iq3s<CodebookRead::kCodes>)->Name("CodebookRead_Iq3s_Codes");

}  // namespace
}  // namespace infera

BENCHMARK_MAIN();
