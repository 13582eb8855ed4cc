#include "parallel/communicator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace infera {
namespace {

// Adds the wall time of its scope to `seconds`.
class ScopedTimer {
 public:
  explicit ScopedTimer(double* seconds) : seconds_(seconds), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  double* seconds_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

Status Communicator::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) return Internal(fmt::format("{}: rank {} is not in a group of {}", what, peer, size_));
  return Status::Ok();
}

Status Communicator::Broadcast(void* data, size_t bytes, int root, bool idle_wait) {
  RETURN_IF_ERROR(CheckPeer(root, "broadcast"));
  // (Waiting for work is not communication time.)
  double idle = 0;
  ScopedTimer t(idle_wait ? &idle : &stats_.seconds);
  ++stats_.calls;
  if (size_ == 1) return Status::Ok();
  if (rank_ == root) stats_.bytes_sent += bytes * (size_ - 1);
  else stats_.bytes_received += bytes;
  return DoBroadcast(data, bytes, root, idle_wait);
}

Status Communicator::AllGather(const float* in, size_t n, float* out) {
  ScopedTimer t(&stats_.seconds);
  ++stats_.calls;
  stats_.bytes_sent += n * sizeof(float);
  stats_.bytes_received += (size_ - 1) * n * sizeof(float);
  if (size_ == 1) {
    if (out != in) std::copy(in, in + n, out);
    return Status::Ok();
  }
  return DoAllGather(in, n, out);
}

Status Communicator::AllReduceSum(float* data, size_t n) {
  if (size_ == 1) return Status::Ok();
  // Gather every rank's part, then sum in rank order on every rank: the
  // order MPI_Allreduce adds in is not specified (it varies with message
  // size and algorithm), and results must be reproducible.
  if (gathered_.size() < size_ * n) gathered_.resize(size_ * n);
  RETURN_IF_ERROR(AllGather(data, n, gathered_.data()));
  // Rank by rank over contiguous rows (vectorizes); each element is still
  // ((r0 + r1) + r2) ...
  std::copy(gathered_.begin(), gathered_.begin() + n, data);
  for (int r = 1; r < size_; ++r) {
    const float* part = &gathered_[r * n];
    for (size_t i = 0; i < n; ++i) data[i] += part[i];
  }
  return Status::Ok();
}

Status Communicator::Gather(const float* in, const std::vector<size_t>& counts, float* out, int root) {
  RETURN_IF_ERROR(CheckPeer(root, "gather"));
  if (counts.size() != static_cast<size_t>(size_)) return Internal("gather: one count per rank expected");
  ScopedTimer t(&stats_.seconds);
  ++stats_.calls;
  if (size_ == 1) {
    if (out != in) std::copy(in, in + counts[0], out);
    return Status::Ok();
  }
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) {
      if (r != root) stats_.bytes_received += counts[r] * sizeof(float);
    }
  } else {
    stats_.bytes_sent += counts[rank_] * sizeof(float);
  }
  return DoGather(in, counts, out, root);
}

Status Communicator::Send(const void* data, size_t bytes, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer, "send"));
  if (peer == rank_) return Internal("send: a rank cannot send to itself");
  ScopedTimer t(&stats_.seconds);
  ++stats_.calls;
  stats_.bytes_sent += bytes;
  return DoSend(data, bytes, peer);
}

Status Communicator::Recv(void* data, size_t bytes, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer, "recv"));
  if (peer == rank_) return Internal("recv: a rank cannot receive from itself");
  ScopedTimer t(&stats_.seconds);
  ++stats_.calls;
  stats_.bytes_received += bytes;
  return DoRecv(data, bytes, peer);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  ScopedTimer t(&stats_.seconds);
  ++stats_.calls;
  return DoSplit(color, key);
}

}  // namespace infera
