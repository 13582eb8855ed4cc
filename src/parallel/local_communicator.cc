#include "parallel/local_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include <fmt/format.h>

namespace infera {
namespace {

// State shared by the ranks of one group. Collectives post a pointer per
// rank, meet at a barrier, copy what they need, and meet again (so no
// buffer is left while another rank still reads it).
struct LocalGroup {
  LocalGroup(int n, std::chrono::milliseconds t)
      : size(n), timeout(t), posted(n), split_req(n), split_group(n), split_rank(n), mail(size_t(n) * n) {}
  const int size;
  const std::chrono::milliseconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool broken = false;
  std::vector<const void*> posted;                      // [size]
  std::vector<std::pair<int, int>> split_req;           // (color, key) [size]
  std::vector<std::shared_ptr<LocalGroup>> split_group;  // [size]
  std::vector<int> split_rank;                          // [size]
  std::vector<std::deque<std::vector<uint8_t>>> mail;   // [src * size + dst]

  Status Barrier() {
    std::unique_lock<std::mutex> lock(mu);
    if (broken) return Unavailable("threads communicator: a rank failed earlier");
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return Status::Ok();
    }
    if (!cv.wait_for(lock, timeout, [&] { return generation != gen || broken; })) {
      broken = true;
      cv.notify_all();
      return Unavailable(fmt::format("threads communicator: the other ranks did not arrive within {} ms",
                                     timeout.count()));
    }
    if (broken) return Unavailable("threads communicator: a rank failed");
    return Status::Ok();
  }
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> g, int rank) : Communicator(rank, g->size), g_(std::move(g)) {}
  const char* backend() const override { return "threads"; }

 protected:
  Status DoBroadcast(void* data, size_t bytes, int root, bool /*idle_wait: waits never spin*/) override {
    g_->posted[rank()] = data;
    RETURN_IF_ERROR(g_->Barrier());
    if (rank() != root && bytes > 0) std::memcpy(data, g_->posted[root], bytes);
    return g_->Barrier();
  }
  Status DoAllGather(const float* in, size_t n, float* out) override {
    g_->posted[rank()] = in;
    RETURN_IF_ERROR(g_->Barrier());
    for (int r = 0; r < size(); ++r) {
      std::memcpy(out + size_t(r) * n, g_->posted[r], n * sizeof(float));
    }
    return g_->Barrier();
  }
  Status DoGather(const float* in, const std::vector<size_t>& counts, float* out, int root) override {
    g_->posted[rank()] = in;
    RETURN_IF_ERROR(g_->Barrier());
    if (rank() == root) {
      size_t at = 0;
      for (int r = 0; r < size(); ++r) {
        std::memcpy(out + at, g_->posted[r], counts[r] * sizeof(float));
        at += counts[r];
      }
    }
    return g_->Barrier();
  }
  Status DoSend(const void* data, size_t bytes, int peer) override {
    const auto* p = static_cast<const uint8_t*>(data);
    std::lock_guard<std::mutex> lock(g_->mu);
    if (g_->broken) return Unavailable("threads communicator: a rank failed");
    g_->mail[size_t(rank()) * size() + peer].emplace_back(p, p + bytes);
    g_->cv.notify_all();
    return Status::Ok();
  }
  Status DoRecv(void* data, size_t bytes, int peer) override {
    std::unique_lock<std::mutex> lock(g_->mu);
    auto& box = g_->mail[size_t(peer) * size() + rank()];
    if (!g_->cv.wait_for(lock, g_->timeout, [&] { return !box.empty() || g_->broken; })) {
      g_->broken = true;
      g_->cv.notify_all();
      return Unavailable(fmt::format("threads communicator: nothing from rank {} within {} ms", peer,
                                     g_->timeout.count()));
    }
    if (box.empty()) return Unavailable("threads communicator: a rank failed");
    std::vector<uint8_t> msg = std::move(box.front());
    box.pop_front();
    if (msg.size() != bytes) {
      return Internal(fmt::format("recv: rank {} sent {} bytes, {} expected", peer, msg.size(), bytes));
    }
    if (bytes > 0) std::memcpy(data, msg.data(), bytes);
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override {
    g_->split_req[rank()] = {color, key};
    RETURN_IF_ERROR(g_->Barrier());
    std::vector<int> members;  // old ranks of my color, in new rank order
    for (int r = 0; r < size(); ++r) {
      if (g_->split_req[r].first == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return g_->split_req[a].second < g_->split_req[b].second; });
    if (members[0] == rank()) {  // the first member makes the group for all
      auto sub = std::make_shared<LocalGroup>(static_cast<int>(members.size()), g_->timeout);
      std::lock_guard<std::mutex> lock(g_->mu);
      for (size_t i = 0; i < members.size(); ++i) {
        g_->split_group[members[i]] = sub;
        g_->split_rank[members[i]] = static_cast<int>(i);
      }
    }
    RETURN_IF_ERROR(g_->Barrier());
    std::shared_ptr<LocalGroup> sub;
    int sub_rank;
    {
      std::lock_guard<std::mutex> lock(g_->mu);
      sub = g_->split_group[rank()];
      sub_rank = g_->split_rank[rank()];
    }
    RETURN_IF_ERROR(g_->Barrier());
    return std::unique_ptr<Communicator>(new LocalCommunicator(std::move(sub), sub_rank));
  }

 private:
  std::shared_ptr<LocalGroup> g_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(int n, std::chrono::milliseconds timeout) {
  auto g = std::make_shared<LocalGroup>(n, timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<LocalCommunicator>(g, r));
  return out;
}

}  // namespace infera
