// The collectives tensor and pipeline parallelism need, behind one small
// interface: broadcast, all-reduce (summed in rank order, so every rank gets
// the same bits, run after run), all-gather, gather to a root, and
// point-to-point send / receive. Implementations: MPI (mpi_communicator.h,
// across processes and hosts) and in-process threads (local_communicator.h,
// tests and `--parallel-backend threads`).
//
// Every operation is collective over the communicator's ranks except
// Send / Recv, and every rank must call collectives in the same order.
// Errors (a dead peer, a broken link, a missed deadline) come back as a
// Status; after one, the communicator is unusable.
//
// Thread-safety: one thread at a time per communicator object (each rank
// owns its own object).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infera/status.h"

namespace infera {

// What a communicator has done so far (this rank's view).
struct CommStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;      // payload bytes this rank contributed or sent
  uint64_t bytes_received = 0;  // payload bytes this rank received
  double seconds = 0;           // wall time inside communication calls (not idle waits)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommStats& stats() const { return stats_; }
  // Names the backend in logs ("mpi", "threads").
  virtual const char* backend() const = 0;

  // data [bytes] of `root` is copied to every rank's data. idle_wait: the
  // caller may wait long (a worker between steps): wait without spinning a
  // core, at the price of up to a few milliseconds' latency. Every rank
  // must pass the same idle_wait (MPI: a non-blocking broadcast matches
  // only non-blocking ones).
  Status Broadcast(void* data, size_t bytes, int root, bool idle_wait = false);
  // data [n] on every rank becomes the sum over ranks, added in rank order
  // ((r0 + r1) + r2 ...): the same bits on every rank and every run.
  Status AllReduceSum(float* data, size_t n);
  // in [n] of every rank -> out [size * n] on every rank (rank r's at r * n).
  Status AllGather(const float* in, size_t n, float* out);
  // in [counts[rank]] of every rank -> out [sum(counts)] on `root`, in rank
  // order (out is unused elsewhere). counts is the same on every rank.
  Status Gather(const float* in, const std::vector<size_t>& counts, float* out, int root);
  // Point to point, matched in order between a pair of ranks.
  Status Send(const void* data, size_t bytes, int peer);
  Status Recv(void* data, size_t bytes, int peer);
  // Collective: the ranks calling with the same `color` form a new
  // communicator, ranked by (key, old rank).
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  virtual Status DoBroadcast(void* data, size_t bytes, int root, bool idle_wait) = 0;
  virtual Status DoAllGather(const float* in, size_t n, float* out) = 0;
  virtual Status DoGather(const float* in, const std::vector<size_t>& counts, float* out, int root) = 0;
  virtual Status DoSend(const void* data, size_t bytes, int peer) = 0;
  virtual Status DoRecv(void* data, size_t bytes, int peer) = 0;
  virtual StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) = 0;

 private:
  Status CheckPeer(int peer, const char* what) const;
  int rank_, size_;
  CommStats stats_;
  std::vector<float> gathered_;  // AllReduceSum's scratch [size * n]
};

}  // namespace infera
