// A fixed pool of worker threads created once (no per-op thread creation).
// The calling thread takes part as thread 0, so a pool of size N starts N-1
// workers. Between jobs, workers spin briefly and then sleep on a condition
// variable, so back-to-back ops (decode) do not pay a wake-up each time.
//
// Thread-safety: Run/ParallelFor must be called from one thread at a time
// (the owner); they are not re-entrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace infera {

class ThreadPool {
 public:
  // n_threads <= 0 means DefaultThreadCount().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on each thread; returns when all
  // calls have returned.
  void Run(FunctionRef<void(int, int)> fn);

  // Splits [0, n) into n_threads contiguous ranges (each a multiple of
  // `align` except the last) and calls fn(begin, end) for each non-empty one.
  void ParallelFor(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn);

  // The CPUs this process may use: its affinity mask, capped by a cgroup v2
  // CPU quota when one is set.
  static int DefaultThreadCount();

 private:
  void WorkerLoop(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  FunctionRef<void(int, int)>* job_ = nullptr;  // valid while pending_ > 0
};

}  // namespace infera
