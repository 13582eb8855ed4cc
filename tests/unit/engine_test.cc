// The serving engine with a real (tiny, random-weight) model: batched ==
// isolated, chunking invariance, prefix cache, preemption, cancellation, and
// every KV block back in the pool at the end.
#include <atomic>
#include <map>

#include <gtest/gtest.h>

#include "infera/engine.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "unit/test_util.h"

namespace infera::engine_test {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  KernelTable kernels = MakeBestKernelTable();
  explicit Fixture(DType type) {
    ModelConfig c = testing::TinyConfig();
    c.n_ctx_train = 2048;
    auto m = LoadModel(testing::WriteTinyModel(c, type, 5, std::string("engine-") + DTypeName(type) + ".gguf"));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
  }
  std::unique_ptr<Engine> Make(EngineOptions o) {
    o.threads = 2;
    auto e = Engine::Create(*model, nullptr, kernels, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }
};

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 101 + 11) % 320;
  return t;
}

RequestParams Greedy(int32_t max_tokens) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Runs all prompts together; returns each one's generated tokens.
std::vector<std::vector<int32_t>> RunAll(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<RequestParams>& params) {
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Add(prompts[i], params[i]);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    idx[*id] = i;
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  int guard = 0;
  while (e.HasWork() && ++guard < 100000) {
    for (const RequestOutput& o : e.Step()) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      auto& v = out[idx.at(o.id)];
      v.insert(v.end(), o.tokens.begin(), o.tokens.end());
    }
  }
  return out;
}

// The emulated AMX-BF16 kernel, counting its calls (engine threads call it).
std::atomic<int64_t> tile_rows_calls{0};
void CountedEmulatedTileRows(DType type, const uint8_t* w, size_t row_bytes, int nr, const uint32_t* x2, int64_t ld2,
                             int64_t m, int64_t n, float* y, int64_t ldy) {
  ++tile_rows_calls;
  amx::Bf16TileRowsEmulated()(type, w, row_bytes, nr, x2, ld2, m, n, y, ldy);
}

class EngineTest : public ::testing::TestWithParam<DType> {};

// 32 varied requests run together give exactly the tokens each gives alone,
// for several batch budgets (and so chunkings of the prompts).
TEST_P(EngineTest, BatchedEqualsIsolated) {
  Fixture f(GetParam());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back(Prompt(3 + (i * 13) % 70, i));
    params.push_back(Greedy(4 + i % 9));
  }
  EngineOptions solo;
  solo.max_num_seqs = 1;
  solo.kv_cache_mb = 4;
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 32; ++i) {
    auto e = f.Make(solo);
    alone.push_back(RunAll(*e, {prompts[i]}, {params[i]})[0]);
    EXPECT_EQ(alone.back().size(), static_cast<size_t>(params[i].max_tokens));
  }
  for (int32_t budget : {7, 64, 512}) {
    EngineOptions o;
    o.max_batched_tokens = budget;
    o.kv_cache_mb = 8;
    auto e = f.Make(o);
    EXPECT_EQ(RunAll(*e, prompts, params), alone) << "budget " << budget;
    for (const char* type : {"q8", "bf16"}) {  // int8 and bf16 KV caches: batched == isolated too
      if (budget != 64) break;
      EngineOptions q = o;
      q.kv_cache_type = type;
      EngineOptions q1 = solo;
      q1.kv_cache_type = type;
      auto eq = f.Make(q);
      auto batched = RunAll(*eq, prompts, params);
      for (int i = 0; i < 32; i += 7) {
        auto e1 = f.Make(q1);
        EXPECT_EQ(RunAll(*e1, {prompts[i]}, {params[i]})[0], batched[i]) << type << " " << i;
      }
    }
    const EngineStats st = e->Stats();
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.num_running + st.num_waiting, 0);
  }
  // bf16 products in the float matmuls (`--matmul-dtype bf16`): batched ==
  // isolated too (prefill converts weight rows first, decode in registers).
  f.kernels.matmul_bf16 = true;
  EngineOptions o;
  o.max_batched_tokens = 64;
  o.kv_cache_mb = 8;
  auto eb = f.Make(o);
  auto batched = RunAll(*eb, prompts, params);
  for (int i = 0; i < 32; i += 5) {
    auto e1 = f.Make(solo);
    EXPECT_EQ(RunAll(*e1, {prompts[i]}, {params[i]})[0], batched[i]) << "bf16 matmuls " << i;
  }
  // A tile unit's form of them (the AMX-BF16 kernel on its software model of
  // the tile instructions: runs wherever AVX512-BF16 does): batched ==
  // isolated too, every token count going through the tiles.
  if (!DetectCpuFeatures().avx512bf16) return;
  f.kernels.bf16_tile_rows = CountedEmulatedTileRows;
  f.kernels.bf16_pairs = amx::Bf16PairsAvx512();
  tile_rows_calls = 0;
  auto et = f.Make(o);
  const auto tiled = RunAll(*et, prompts, params);
  EXPECT_GT(tile_rows_calls.load(), 0);
  for (int i = 0; i < 32; i += 5) {
    auto e1 = f.Make(solo);
    EXPECT_EQ(RunAll(*e1, {prompts[i]}, {params[i]})[0], tiled[i]) << "bf16 tile form " << i;
  }
}

// With a pool a quarter of the demand, 64 requests all finish (preemption
// and recomputation) with the outputs they give alone.
TEST_P(EngineTest, PreemptionKeepsOutputs) {
  Fixture f(GetParam());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params;
  for (int i = 0; i < 64; ++i) {
    prompts.push_back(Prompt(20 + i % 30, i + 100));
    params.push_back(Greedy(24));
  }
  EngineOptions solo;
  solo.max_num_seqs = 1;
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 64; ++i) {
    auto e = f.Make(solo);
    alone.push_back(RunAll(*e, {prompts[i]}, {params[i]})[0]);
  }
  // Demand: 64 x (up to 73 tokens) = 5 blocks of 16 each = 320 blocks; pool 80.
  // KV per token: 2 layers x 2 (K, V) x 32 floats = 512 bytes; 80 blocks = 640 KiB.
  EngineOptions o;
  o.kv_cache_mb = 1;  // 128 blocks; still ~ a third of the demand
  o.max_batched_tokens = 128;
  auto e = f.Make(o);
  EXPECT_EQ(RunAll(*e, prompts, params), alone);
  EXPECT_GT(e->Stats().num_preemptions, 0u);
  EXPECT_EQ(e->Stats().kv_blocks_used, 0);
}

TEST_P(EngineTest, PrefixCacheComputesOnlyTheSuffix) {
  Fixture f(GetParam());
  EngineOptions o;
  o.kv_cache_mb = 8;
  auto e = f.Make(o);
  std::vector<int32_t> a = Prompt(1000, 1), b = a;
  a.push_back(5);
  b.insert(b.end(), {6, 7, 8});
  auto first = RunAll(*e, {a}, {Greedy(3)});
  const uint64_t before = e->Stats().prefill_tokens_computed;
  EXPECT_EQ(before, 1001u);  // prompt tokens computed (decode steps are not prefill)
  std::map<uint64_t, int32_t> cached;
  auto id = e->Add(b, Greedy(3));
  ASSERT_TRUE(id.ok());
  int32_t cached_tokens = -1;
  while (e->HasWork()) {
    for (const auto& out : e->Step()) cached_tokens = out.cached_tokens;
  }
  // 1000 / 16 = 62 full blocks shared; the suffix (1003 - 992 = 11 tokens) computed.
  EXPECT_EQ(cached_tokens, 992);
  EXPECT_EQ(e->Stats().prefill_tokens_computed - before, 11u);
  // The same output as without the cache.
  EngineOptions nc = o;
  nc.prefix_caching = false;
  auto e2 = f.Make(nc);
  auto e3 = f.Make(o);
  RunAll(*e3, {a}, {Greedy(3)});
  EXPECT_EQ(RunAll(*e3, {b}, {Greedy(5)}), RunAll(*e2, {b}, {Greedy(5)}));
}

TEST_P(EngineTest, CancelFreesBlocksWithinOneStep) {
  Fixture f(GetParam());
  EngineOptions o;
  o.kv_cache_mb = 2;
  auto e = f.Make(o);
  auto id = e->Add(Prompt(100, 3), Greedy(1000));
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 5; ++i) e->Step();
  EXPECT_GT(e->Stats().kv_blocks_used, 0);
  e->Cancel(*id);
  auto outs = e->Step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].finished);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(e->Stats().kv_blocks_used, 0);
  EXPECT_FALSE(e->HasWork());
}

TEST_P(EngineTest, RefusesRequestsThatCanNeverFit) {
  Fixture f(GetParam());
  EngineOptions o;
  o.max_model_len = 64;
  o.kv_cache_mb = 1;
  auto e = f.Make(o);
  EXPECT_FALSE(e->Add(Prompt(60, 1), Greedy(10)).ok());   // beyond the context
  EXPECT_FALSE(e->Add({}, Greedy(10)).ok());
  EXPECT_FALSE(e->Add({1, 400}, Greedy(10)).ok());        // token id out of range
  RequestParams bad = Greedy(4);
  bad.sampling.temperature = -1;
  EXPECT_FALSE(e->Add({1, 2}, bad).ok());
  EXPECT_TRUE(e->Add(Prompt(10, 1), Greedy(10)).ok());
}

// --context-shift: a generation longer than the context goes on (the older
// half of the tokens after the first 4 dropped at each shift, the rest
// recomputed) instead of being refused.
TEST_P(EngineTest, ContextShiftGoesPastTheContext) {
  Fixture f(GetParam());
  EngineOptions o;
  o.max_model_len = 48;
  o.kv_cache_mb = 1;
  auto plain = f.Make(o);
  EXPECT_FALSE(plain->Add(Prompt(20, 2), Greedy(150)).ok());
  o.context_shift = true;
  auto e = f.Make(o);
  auto out = RunAll(*e, {Prompt(20, 2), Prompt(30, 3)}, {Greedy(150), Greedy(100)});
  EXPECT_EQ(out[0].size(), 150u);
  EXPECT_EQ(out[1].size(), 100u);
  EXPECT_EQ(e->Stats().kv_blocks_used, 0);
  // Up to the first shift the tokens are those of a plain run.
  auto ref = RunAll(*f.Make(EngineOptions{}), {Prompt(20, 2)}, {Greedy(28)});
  EXPECT_EQ(std::vector<int32_t>(out[0].begin(), out[0].begin() + 28), ref[0]);
}

INSTANTIATE_TEST_SUITE_P(Types, EngineTest, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace infera::engine_test
