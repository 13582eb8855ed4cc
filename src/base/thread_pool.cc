#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#define INFERA_CPU_RELAX() _mm_pause()
#else
#define INFERA_CPU_RELAX() std::this_thread::yield()
#endif

namespace infera {
namespace {
constexpr int kSpinIterations = 20000;  // ~ a few hundred microseconds of pause
// While spinning, give the core away this often: when a core is shared, the
// thread being waited for may be queued behind the spinner on the same core.
// (sched_yield returns at once when nothing else is runnable there.)
// Short waits (the next op of a decode step, a piece finishing) pause only.
constexpr int kPauseOnly = 2000;
constexpr int kYieldEvery = 16;

void Relax(int spins) {
  if (spins > kPauseOnly && spins % kYieldEvery == 0) std::this_thread::yield();
  else INFERA_CPU_RELAX();
}
constexpr int kWindowOps = 512;          // Adapt: ops per decision (a few decode tokens)
constexpr int kWindowsBeforeProbe = 16;  // windows with a worker benched before trying it again

// Reads one integer from a sysfs file (-1 if absent).
long ReadLong(const std::string& path) {
  long v = -1;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    if (std::fscanf(f, "%ld", &v) != 1) v = -1;
    std::fclose(f);
  }
  return v;
}
}  // namespace

int ThreadPool::DefaultThreadCount() {
  // The CPUs this process may run on (taskset, container cpusets), SMT
  // siblings counted once: two threads on one core's siblings share its
  // execution units, and a spare sibling is better left to the OS.
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    std::set<std::pair<long, long>> cores;
    int cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      ++cpus;
      const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      const long core = ReadLong(topo + "core_id"), pkg = ReadLong(topo + "physical_package_id");
      cores.insert(core < 0 ? std::make_pair(-1L - cpu, 0L) : std::make_pair(pkg, core));
    }
    n = std::min<int>(cpus, static_cast<int>(cores.size()));
  }
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

ThreadPool::ThreadPool(int n_threads, uint64_t first_generation)
    : n_threads_(n_threads <= 0 ? DefaultThreadCount() : n_threads),
      ticket_(first_generation),
      homes_(new Home[static_cast<size_t>(n_threads_)]),
      active_helpers_(n_threads_ - 1),
      gen_(first_generation) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    ticket_.store(gen_ + 1);  // a new generation, with no pieces
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunPiece(const Job& j, int thread, int64_t c) {
  const int64_t per = j.units / j.n_pieces, extra = j.units % j.n_pieces;
  const int64_t ub = c * per + std::min(c, extra);
  const int64_t ue = ub + per + (c < extra ? 1 : 0);
  (*j.fn)(thread, ub * j.align, std::min(j.n, ue * j.align));
}

int64_t ThreadPool::Take(int h, uint64_t gen) {
  std::atomic<uint64_t>& next = homes_[h].next;
  const uint64_t g = PackedGen(gen);
  uint64_t t = next.load(std::memory_order_acquire);
  for (;;) {
    if (Gen(t) != g || Taken(t) >= Size(t)) return -1;
    if (next.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return Taken(t);
  }
}

int64_t ThreadPool::Help(int thread, uint64_t gen) {
  if (thread > active_helpers_.load(std::memory_order_relaxed)) return 0;  // benched (see Adapt)
  int64_t ran = 0;
  for (int k = 0; k < n_threads_; ++k) {
    const int h = (thread + k) % n_threads_;
    for (int64_t i; (i = Take(h, gen)) >= 0;) {
      // The op cannot end (nor job_ change) before this piece is done.
      const Job& j = *job_.load(std::memory_order_acquire);
      RunPiece(j, thread, j.HomeBegin(h) + i);
      ++ran;
    }
  }
  // The caller counts its own pieces; a helper's go through `done`, once per
  // op (the caller polls that line: an update per piece cost a transfer each).
  if (thread != 0 && ran > 0) homes_[thread].done.fetch_add(ran, std::memory_order_release);
  return ran;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = ticket_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        Relax(spins);
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return ticket_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      spins = 0;
    }
    seen = gen;
    if (stop_.load()) return;
    Help(index, gen);
  }
}

void ThreadPool::ParallelForWithThread(int64_t n, int64_t align, FunctionRef<void(int, int64_t, int64_t)> fn,
                                       int pieces_per_thread) {
  if (n <= 0) return;
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  const int64_t n_pieces = std::min<int64_t>(
      {units, int64_t{n_threads_} * std::max(pieces_per_thread, 1), (1 << kPieceBits) - 1});
  if (n_threads_ == 1 || n_pieces <= 1 || active_helpers_.load(std::memory_order_relaxed) == 0) {
    fn(0, 0, n);
    if (n_threads_ > 1 && n_pieces > 1) Adapt(n_pieces, n_pieces, 0, 0);  // counts towards the next probe
    return;
  }
  using Clock = std::chrono::steady_clock;
  const bool timed = (gen_ & 3) == 0;
  const auto t0 = timed ? Clock::now() : Clock::time_point();
  const Job job{&fn, n, align, units, n_pieces, static_cast<int>(std::min<int64_t>(n_threads_, n_pieces))};
  ++gen_;
  // The home runs are reset for the new generation before it is published.
  for (int h = 0; h < n_threads_; ++h) {
    const uint64_t size = h < job.n_homes ? job.HomeBegin(h + 1) - job.HomeBegin(h) : 0;
    homes_[h].next.store((gen_ << (2 * kPieceBits)) | (size << kPieceBits), std::memory_order_relaxed);
  }
  job_.store(&job, std::memory_order_release);
  ticket_.store(gen_, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  const int64_t mine = Help(0, gen_);
  const auto t1 = timed ? Clock::now() : Clock::time_point();
  // Only pieces other threads already took remain.
  int spins = 0;
  const int64_t want = helpers_done_ + (n_pieces - mine);
  for (;;) {
    int64_t sum = 0;
    for (int h = 1; h < n_threads_; ++h) sum += homes_[h].done.load(std::memory_order_acquire);
    if (sum == want) break;
    Relax(++spins);
  }
  helpers_done_ = want;
  job_.store(nullptr, std::memory_order_relaxed);
  if (timed) Adapt(n_pieces, mine, std::chrono::duration<double>(t1 - t0).count(),
        std::chrono::duration<double>(Clock::now() - t1).count());
}

void ThreadPool::Adapt(int64_t n_pieces, int64_t mine, double own, double wait) {
  // What the helpers' pieces would have cost the caller, against the wait.
  if (mine > 0) window_saved_ += own / mine * (n_pieces - mine);
  window_waited_ += wait;
  if (++window_ops_ < kWindowOps) return;
  const int active = active_helpers_.load(std::memory_order_relaxed);
  if (active > 0 && window_waited_ > window_saved_) {
    active_helpers_.store(active - 1, std::memory_order_relaxed);
    windows_reduced_ = 0;
  } else if (active < n_threads_ - 1 && ++windows_reduced_ >= kWindowsBeforeProbe) {
    active_helpers_.store(active + 1, std::memory_order_relaxed);  // try one again
    windows_reduced_ = 0;
  }
  window_ops_ = 0;
  window_saved_ = window_waited_ = 0;
}

void ThreadPool::ParallelFor(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn,
                             int pieces_per_thread) {
  ParallelForWithThread(n, align, [&](int, int64_t b, int64_t e) { fn(b, e); }, pieces_per_thread);
}

}  // namespace infera
