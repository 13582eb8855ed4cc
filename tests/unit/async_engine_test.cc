// The engine on its loop thread: submissions from many threads, cancellation
// from another thread, draining, destruction with work in flight.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "engine/async_engine.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "unit/test_util.h"

namespace infera::async_engine_test {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  KernelTable kernels = MakeBestKernelTable();
  Fixture() {
    ModelConfig c = testing::TinyConfig();
    c.n_ctx_train = 1024;
    auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 9, "async-engine.gguf"));
    EXPECT_TRUE(m.ok());
    model = std::move(m).value();
  }
  // endless: with context shift and no max_tokens a request only ends when cancelled.
  std::unique_ptr<AsyncEngine> Make(bool endless = false) {
    EngineOptions o;
    o.context_shift = endless;
    o.threads = 2;
    o.kv_cache_mb = 4;
    auto e = AsyncEngine::Create(*model, nullptr, kernels, o);
    EXPECT_TRUE(e.ok());
    return std::move(e).value();
  }
};

RequestParams Greedy(int32_t n) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST(AsyncEngine, ManyThreadsSubmitAndAllFinish) {
  Fixture f;
  auto e = f.Make();
  std::mutex mu;
  std::map<uint64_t, int> tokens;
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        std::vector<int32_t> prompt(5 + i + t, 7 + t);
        auto id = e->Submit(prompt, Greedy(6), [&](const RequestOutput& o) {
          std::lock_guard<std::mutex> lock(mu);
          tokens[o.id] += static_cast<int>(o.tokens.size());
          if (o.finished) {
            EXPECT_EQ(o.finish_reason, FinishReason::kLength);
            ++finished;
          }
        });
        EXPECT_TRUE(id.ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(e->Drain(std::chrono::seconds(60)));
  EXPECT_EQ(finished.load(), 32);
  for (const auto& [id, n] : tokens) EXPECT_EQ(n, 6) << id;
  EXPECT_EQ(e->Stats().kv_blocks_used, 0);
  // Draining: no new work.
  auto refused = e->Submit({1, 2, 3}, Greedy(2), nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST(AsyncEngine, CancelFromAnotherThreadAndShutdownWithWorkInFlight) {
  Fixture f;
  auto e = f.Make(/*endless=*/true);
  std::atomic<bool> got_token{false}, cancelled{false};
  auto id = e->Submit(std::vector<int32_t>(20, 3), Greedy(-1), [&](const RequestOutput& o) {
    if (!o.tokens.empty()) got_token = true;
    if (o.finished && o.finish_reason == FinishReason::kCancelled) cancelled = true;
  });
  ASSERT_TRUE(id.ok());
  while (!got_token) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread([&] { e->Cancel(*id); }).join();
  for (int i = 0; i < 20000 && !cancelled; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(cancelled.load());
  EXPECT_EQ(e->Stats().kv_blocks_used, 0);
  // Destroying with a request in flight cancels it (its callback sees the end).
  std::atomic<bool> ended{false};
  ASSERT_TRUE(e->Submit(std::vector<int32_t>(10, 4), Greedy(-1), [&](const RequestOutput& o) {
    if (o.finished) ended = true;
  }).ok());
  e.reset();
  EXPECT_TRUE(ended.load());
}

}  // namespace
}  // namespace infera::async_engine_test
