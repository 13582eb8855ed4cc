// A fixed pool of worker threads created once (no per-op thread creation).
// The calling thread takes part as thread 0, so a pool of size N starts N-1
// workers.
//
// Work is dealt with stealing: an op is cut into pieces (the cut depends only
// on the op's size, the pool's size and the pieces per thread asked for), and
// each thread has a home run of consecutive pieces, taken through a counter
// on the thread's own cache line (uncontended). A thread whose home run is
// used up takes the pieces left in the others' runs, from their counters. So
// a thread that runs slower (a core shared with another process, a vCPU the
// host stole for a while) leaves its last pieces to the others instead of
// keeping them waiting, and the pieces cost no contended atomics while the
// runs last. The caller waits
// only for pieces already taken, never for a worker to show up: when a
// worker is descheduled, the caller takes its pieces and the op ends. Which
// thread runs a piece does not change any result, as long as the function
// computes each index the same way whatever the range it is given (every
// caller here does).
//
// A helper on a core shared with another busy process runs only part of the
// time, and the caller ends up waiting for the pieces it took. The pool
// weighs, over windows of ops, what the helpers saved the caller (their
// pieces, at the caller's own time per piece) against the time it waited for
// them; when the wait costs more, it stops dealing pieces to one worker, and
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
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace infera {

class ThreadPool {
 public:
  // n_threads <= 0 means DefaultThreadCount(). first_generation: where the
  // op counter starts (tests of its wrap-around; otherwise 0).
  explicit ThreadPool(int n_threads, uint64_t first_generation = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Pieces per thread's home run, by default: short ops (decode's matmuls,
  // tens of microseconds) end with one thread waiting for the other's last
  // piece, so smaller pieces waste less. Ops that block their work by ranges
  // (a prefill matmul streams its tokens once per range of rows) pass fewer.
  static constexpr int kPiecesPerThread = 16;

  // Splits [0, n) into ranges whose bounds are multiples of `align` (except
  // n) and calls fn(begin, end) once for each, on any of the pool's threads.
  // At most pieces_per_thread * size() ranges. Returns when all calls have
  // returned.
  void ParallelFor(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn,
                   int pieces_per_thread = kPiecesPerThread);
  // The same, telling fn which pool thread (0 .. size() - 1) runs the range:
  // for per-thread scratch. fn(thread, begin, end).
  void ParallelForWithThread(int64_t n, int64_t align, FunctionRef<void(int, int64_t, int64_t)> fn,
                             int pieces_per_thread = kPiecesPerThread);

  // The cores this process may use: the physical cores (SMT siblings count
  // once) of its affinity mask, capped by a cgroup v2 CPU quota when one is set.
  static int DefaultThreadCount();

 private:
  // One op: piece c covers [c * per + min(c, extra), ...) in units of align;
  // thread h's home run is pieces [HomeBegin(h), HomeBegin(h + 1)).
  struct Job {
    FunctionRef<void(int, int64_t, int64_t)>* fn;
    int64_t n, align, units, n_pieces;
    int n_homes;
    int64_t HomeBegin(int h) const { return n_pieces * h / n_homes; }
  };
  // One per thread, on its own cache lines. `next` packs the op's generation,
  // the size of the thread's home run and how many of its pieces were taken,
  // so a stale helper can never take a piece of a newer op, nor one of an op
  // that has ended; `done` counts the pieces the thread finished (all ops,
  // added once per op; only the thread itself writes it).
  struct alignas(64) Home {
    std::atomic<uint64_t> next{0};
    alignas(64) std::atomic<int64_t> done{0};
  };
  static constexpr int kPieceBits = 20;
  // The low 64 - 2 * kPieceBits bits of a generation (it wraps there).
  static uint64_t Gen(uint64_t t) { return t >> (2 * kPieceBits); }
  static uint64_t PackedGen(uint64_t gen) { return Gen(gen << (2 * kPieceBits)); }
  static int64_t Size(uint64_t t) { return static_cast<int64_t>((t >> kPieceBits) & ((1u << kPieceBits) - 1)); }
  static int64_t Taken(uint64_t t) { return static_cast<int64_t>(t & ((1u << kPieceBits) - 1)); }

  void WorkerLoop(int index);
  // After an op of n_pieces: the caller ran `mine` of them in `own` seconds,
  // then waited `wait` seconds for the helpers'. Adjusts active_helpers_.
  void Adapt(int64_t n_pieces, int64_t mine, double own, double wait);
  // Runs piece c of job j on pool thread `thread`.
  static void RunPiece(const Job& j, int thread, int64_t c);
  // Takes the next piece of home h's run for generation `gen`: its index
  // within the run, or -1 if none is left.
  int64_t Take(int h, uint64_t gen);
  // Takes and runs pieces of generation `gen` (its home run first, then the
  // others') until none is left; returns how many it ran.
  int64_t Help(int thread, uint64_t gen);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> ticket_{0};       // the current op's generation (workers wake on a change)
  std::unique_ptr<Home[]> homes_;         // [n_threads_]
  std::atomic<const Job*> job_{nullptr};  // the current op's; valid while pieces of it are out
  std::atomic<int> sleepers_{0};
  std::atomic<int> active_helpers_{0};  // workers 1 .. active_helpers_ take pieces
  std::atomic<bool> stop_{false};
  uint64_t gen_ = 0;           // owner's: the last op's generation
  int64_t helpers_done_ = 0;   // owner's: the helpers' `done` sum after the last op
  // Owner's: the current window of ops for Adapt.
  int window_ops_ = 0, windows_reduced_ = 0;
  double window_saved_ = 0, window_waited_ = 0;
};

}  // namespace infera
