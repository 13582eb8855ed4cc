// A fixed pool of worker threads created once (no per-op thread creation).
// The calling thread takes part as thread 0, so a pool of size N starts N-1
// workers.
//
// Work is dealt dynamically: an op is cut into one chunk per thread (the cut
// depends only on the op's size and the pool's size); the caller runs chunk
// 0, and every thread, the caller included, takes the next chunk from a
// shared counter until none is left. The caller waits only for chunks already
// taken, never for a worker to show up: when a core is shared with another
// busy process and a worker is descheduled, the caller takes its chunk and
// the op ends. (More chunks per thread balance better but cost two contended
// atomics each, measurably slower decode here.) Which thread runs a chunk
// does not change any result, as long as the function computes each index
// the same way whatever the range it is given (every caller here does).
//
// A helper on a core shared with another busy process runs only part of the
// time, and the caller ends up waiting for the chunks it took. The pool
// weighs, over windows of ops, what the helpers saved the caller (their
// chunks, at the caller's own time per chunk) against the time it waited for
// them; when the wait costs more, it stops dealing chunks to one worker, and
// after a while tries it again. Under contention decode then runs at about
// the -t 1 rate instead of below it (bench/contention.sh).
//
// Between ops, workers spin briefly (yielding now and then, in case they
// share a core with the thread they wait for) and then sleep on a condition
// variable, so back-to-back ops (decode) do not pay a wake-up each time.
//
// Thread-safety: ParallelFor must be called from one thread at a time (the
// owner); it is not re-entrant.
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

  // Splits [0, n) into ranges whose bounds are multiples of `align` (except
  // n) and calls fn(begin, end) once for each, on any of the pool's threads.
  // Returns when all calls have returned.
  void ParallelFor(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn);
  // The same, telling fn which pool thread (0 .. size() - 1) runs the range:
  // for per-thread scratch. fn(thread, begin, end).
  void ParallelForWithThread(int64_t n, int64_t align, FunctionRef<void(int, int64_t, int64_t)> fn);

  // The cores this process may use: the physical cores (SMT siblings count
  // once) of its affinity mask, capped by a cgroup v2 CPU quota when one is set.
  static int DefaultThreadCount();

 private:
  // One op: chunk c covers [c * per + min(c, extra), ...) in units of align.
  struct Job {
    FunctionRef<void(int, int64_t, int64_t)>* fn;
    int64_t n, align, units, n_chunks;
  };
  // The ticket packs the op's generation, its chunk count and the next chunk
  // to take, so a stale helper can never take a chunk of a newer op.
  static constexpr int kChunkBits = 20;
  static uint64_t Gen(uint64_t t) { return t >> (2 * kChunkBits); }
  static int64_t Chunks(uint64_t t) { return static_cast<int64_t>((t >> kChunkBits) & ((1u << kChunkBits) - 1)); }
  static int64_t Next(uint64_t t) { return static_cast<int64_t>(t & ((1u << kChunkBits) - 1)); }

  void WorkerLoop(int index);
  // After an op of n_chunks: the caller ran `mine` of them in `own` seconds,
  // then waited `wait` seconds for the helpers'. Adjusts active_helpers_.
  void Adapt(int64_t n_chunks, int64_t mine, double own, double wait);
  // Runs chunk c of job j on pool thread `thread`.
  static void RunChunk(const Job& j, int thread, int64_t c);
  // Takes and runs chunks of generation `gen` until none is left; returns
  // how many it ran.
  int64_t Help(int thread, uint64_t gen);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<const Job*> job_{nullptr};  // the current op's; valid while chunks of it are out
  std::atomic<int> sleepers_{0};
  std::atomic<int> active_helpers_{0};  // workers 1 .. active_helpers_ take chunks
  std::atomic<bool> stop_{false};
  uint64_t gen_ = 0;  // owner's: the last op's generation
  // Owner's: the current window of ops for Adapt.
  int window_ops_ = 0, windows_reduced_ = 0;
  double window_saved_ = 0, window_waited_ = 0;
};

}  // namespace infera
