#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace infera {
namespace {

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 16, 17, 63, 1000, 100003}) {
      for (int64_t align : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, align, [&](int64_t b, int64_t e) {
          EXPECT_EQ(b % align, 0);
          EXPECT_TRUE(e == n || e % align == 0);
          EXPECT_LT(b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, n " << n << ", align " << align;
      }
    }
  }
}

// Per-thread scratch is safe: a thread index is never in use by two calls at
// once, and every index is in [0, size).
TEST(ThreadPool, ThreadIndicesAreExclusive) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> busy(4);
  std::atomic<int64_t> covered{0};
  for (int rep = 0; rep < 300; ++rep) {
    pool.ParallelForWithThread(97, 1, [&](int t, int64_t b, int64_t e) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 4);
      EXPECT_EQ(busy[t].fetch_add(1), 0);
      covered += e - b;
      busy[t].fetch_sub(1);
    });
  }
  EXPECT_EQ(covered.load(), 300 * 97);
}

// Many tiny ops back to back (decode's pattern): no chunk lost or run twice
// when helpers arrive late or leave early.
TEST(ThreadPool, BackToBackTinyOps) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int rep = 0; rep < 20000; ++rep) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 1 + rep % 40;
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << rep;
    total += n;
  }
  EXPECT_GT(total, 0);
}

// Workers that went to sleep wake for the next op and take part in it.
TEST(ThreadPool, SleepingWorkersWakeAndHelp) {
  ThreadPool pool(2);
  std::set<int> seen;
  std::mutex mu;
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers go to sleep
    pool.ParallelForWithThread(8, 1, [&](int t, int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // long enough for the worker to arrive
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(t);
    });
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace infera
