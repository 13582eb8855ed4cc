#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace infera {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(n);
      pool.Run([&](int t, int nt) {
        EXPECT_EQ(nt, n);
        hits[t]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 5, 16, 17, 1000}) {
    for (int64_t align : {1, 16}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, align, [&](int64_t b, int64_t e) {
        EXPECT_TRUE(b % align == 0);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, SurvivesIdleSleepAndWakes) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers go to sleep
    pool.Run([&](int t, int) { sum += t + 1; });
  }
  EXPECT_EQ(sum.load(), 9);
}

}  // namespace
}  // namespace infera
