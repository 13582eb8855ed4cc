#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <cstdlib>

#include <fmt/format.h>

#ifdef INFERA_HAVE_MPI
#include <mpi.h>
#endif

namespace infera {

bool MpiAvailable() {
#ifdef INFERA_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

#ifdef INFERA_HAVE_MPI
namespace {

Status MpiError(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Unavailable(fmt::format("MPI {} failed: {}", what, std::string(msg, len)));
}

// Messages larger than INT_MAX elements go in pieces.
constexpr size_t kMaxChunk = size_t(1) << 30;

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, bool owned)
      : Communicator(rank, size), comm_(comm), owned_(owned) {}
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  const char* backend() const override { return "mpi"; }

 protected:
  Status DoBroadcast(void* data, size_t bytes, int root, bool idle_wait) override {
    auto* p = static_cast<char*>(data);
    if (idle_wait && bytes <= kMaxChunk) {
      // Open MPI's blocking calls poll a core at 100%: between steps a
      // worker may wait for hours. Test a non-blocking broadcast, polling
      // for the first millisecond (steps come back to back while serving),
      // then sleeping in between (50 us growing to 2 ms).
      MPI_Request req;
      RETURN_IF_ERROR(MpiError(MPI_Ibcast(p, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req), "broadcast"));
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      auto nap = std::chrono::microseconds(50);
      for (;;) {
        int done = 0;
        RETURN_IF_ERROR(MpiError(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast"));
        if (done) return Status::Ok();
        if (std::chrono::steady_clock::now() < spin_until) continue;
        std::this_thread::sleep_for(nap);
        nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(2));
      }
    }
    for (size_t at = 0; at < bytes; at += kMaxChunk) {
      const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
      RETURN_IF_ERROR(MpiError(MPI_Bcast(p + at, n, MPI_BYTE, root, comm_), "broadcast"));
    }
    return Status::Ok();
  }
  Status DoAllGather(const float* in, size_t n, float* out) override {
    if (n > INT_MAX) return Unimplemented("all-gather of more than 2^31 values");
    return MpiError(MPI_Allgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, comm_),
                    "all-gather");
  }
  Status DoGather(const float* in, const std::vector<size_t>& counts, float* out, int root) override {
    std::vector<int> cnt(size()), displs(size());
    size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      if (counts[r] > INT_MAX || at > INT_MAX) return Unimplemented("gather of more than 2^31 values");
      cnt[r] = static_cast<int>(counts[r]);
      displs[r] = static_cast<int>(at);
      at += counts[r];
    }
    return MpiError(MPI_Gatherv(in, cnt[rank()], MPI_FLOAT, out, cnt.data(), displs.data(), MPI_FLOAT, root, comm_),
                    "gather");
  }
  Status DoSend(const void* data, size_t bytes, int peer) override {
    const auto* p = static_cast<const char*>(data);
    for (size_t at = 0; at < bytes || at == 0; at += kMaxChunk) {
      const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
      RETURN_IF_ERROR(MpiError(MPI_Send(p + at, n, MPI_BYTE, peer, kTag, comm_), "send"));
      if (bytes == 0) break;
    }
    return Status::Ok();
  }
  Status DoRecv(void* data, size_t bytes, int peer) override {
    auto* p = static_cast<char*>(data);
    for (size_t at = 0; at < bytes || at == 0; at += kMaxChunk) {
      const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
      MPI_Status st;
      RETURN_IF_ERROR(MpiError(MPI_Recv(p + at, n, MPI_BYTE, peer, kTag, comm_, &st), "receive"));
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (got != n) return Internal(fmt::format("recv: rank {} sent {} bytes, {} expected", peer, got, n));
      if (bytes == 0) break;
    }
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override {
    MPI_Comm sub;
    RETURN_IF_ERROR(MpiError(MPI_Comm_split(comm_, color, key, &sub), "split"));
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    int r = 0, n = 0;
    MPI_Comm_rank(sub, &r);
    MPI_Comm_size(sub, &n);
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, r, n, true));
  }

 private:
  static constexpr int kTag = 7;
  MPI_Comm comm_;
  bool owned_;
};

}  // namespace

StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::Init() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return Internal("MPI is already initialized in this process");
  int provided = 0;
  RETURN_IF_ERROR(MpiError(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init"));
  std::unique_ptr<MpiRuntime> rt(new MpiRuntime());
  if (provided < MPI_THREAD_SERIALIZED) {
    return Unavailable("this MPI library does not support calls from more than one thread (MPI_THREAD_SERIALIZED)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int r = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  rt->world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, r, n, false);
  return rt;
}

MpiRuntime::~MpiRuntime() {
  world_.reset();
  MPI_Finalize();
}

void MpiRuntime::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

#else  // !INFERA_HAVE_MPI

StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::Init() {
  return Unavailable("this build of infera has no MPI (install libopenmpi-dev and rebuild)");
}
MpiRuntime::~MpiRuntime() = default;
void MpiRuntime::Abort(int code) { std::_Exit(code); }

#endif

}  // namespace infera
