#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define INFERA_CPU_RELAX() _mm_pause()
#else
#define INFERA_CPU_RELAX() std::this_thread::yield()
#endif

namespace infera {
namespace {
constexpr int kSpinIterations = 20000;  // ~ tens of microseconds of pause
}

int ThreadPool::DefaultThreadCount() {
  // The CPUs this process may run on (taskset, container cpusets)...
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  // ... and no more than a cgroup v2 CPU quota grants ("max" or "QUOTA PERIOD").
  if (FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {
    char quota[32] = {};
    long long period = 0;
    if (std::fscanf(f, "%31s %lld", quota, &period) == 2 && std::strcmp(quota, "max") != 0 && period > 0) {
      const long long q = std::atoll(quota);
      if (q > 0) n = std::min<int>(n, static_cast<int>(std::max<long long>(1, (q + period - 1) / period)));
    }
    std::fclose(f);
  }
  return std::max(1, n);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads <= 0 ? DefaultThreadCount() : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = generation_.load(std::memory_order_seq_cst)) == seen) {
      if (++spins < kSpinIterations) {
        INFERA_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      spins = 0;
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::Run(FunctionRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  fn(0, n_threads_);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinIterations) INFERA_CPU_RELAX();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, units));
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  Run([&](int t, int) {
    if (t >= nt) return;
    const int64_t per = units / nt, extra = units % nt;
    const int64_t ub = t * per + std::min<int64_t>(t, extra);
    const int64_t ue = ub + per + (t < extra ? 1 : 0);
    const int64_t b = ub * align, e = std::min(n, ue * align);
    if (b < e) fn(b, e);
  });
}

}  // namespace infera
