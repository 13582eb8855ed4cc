#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace infera::thread_pool_test {
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

// The op counter wraps in the home counters' generation bits (after 2^24
// ops, minutes of decode) without losing or repeating a piece, or hanging.
TEST(ThreadPool, GenerationWrapsAround) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads, (uint64_t{1} << 24) - 100);
    for (int rep = 0; rep < 300; ++rep) {
      std::vector<std::atomic<int>> hits(64);
      pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, op " << rep;
    }
  }
}

// A slow thread leaves the rest of its share to the others: with one piece
// far slower than the rest, the other threads run more than their share.
TEST(ThreadPool, IdleThreadsTakeTheRestOfASlowThreadsShare) {
  ThreadPool pool(2);
  std::atomic<int> pieces_by_caller{0}, pieces_by_worker{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int rep = 0; rep < 20; ++rep) {
    pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
      const bool by_caller = std::this_thread::get_id() == caller;
      if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow piece
      (by_caller ? pieces_by_caller : pieces_by_worker) += static_cast<int>(e - b);
    });
  }
  EXPECT_EQ(pieces_by_caller + pieces_by_worker, 20 * 8);
  // The caller runs piece 0 (its home run's first) each time; the worker then
  // takes the caller's other pieces too, unless it was not running at all.
  EXPECT_GT(pieces_by_worker.load(), 20 * 4);
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
}  // namespace infera::thread_pool_test
