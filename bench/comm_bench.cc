// Per-collective latency and bandwidth of the Communicator, as the decoder
// uses it: all-reduce (summed in rank order), all-gather, broadcast, and a
// send/receive ping-pong, for message sizes from one float to 4 MiB.
//
//   mpirun -np 2 build/bench/comm_bench [--reps N]        (MPI: shared memory,
//                                                          or TCP between hosts)
//   build/bench/comm_bench --threads 2 [--reps N]          (in-process threads)
//
// Rank 0 prints one row per (operation, size): the median time of one call
// and the payload rate (bytes of the message / time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "parallel/local_communicator.h"
#include "parallel/mpi_communicator.h"

namespace infera {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs every test on this rank's communicator; rank 0 prints.
void RunAll(Communicator& c, int reps) {
  const int r = c.rank();
  if (r == 0) {
    std::printf("backend %s, %d ranks, %d repetitions (median)\n", c.backend(), c.size(), reps);
    std::printf("| %-10s | %10s | %12s | %10s |\n", "op", "bytes", "us per call", "MB/s");
    std::printf("|------------|------------|--------------|------------|\n");
  }
  for (size_t n : {size_t(1), size_t(256), size_t(4096), size_t(65536), size_t(1) << 20}) {
    std::vector<float> a(n, 1.0f), g(n * c.size());
    const char* names[] = {"allreduce", "allgather", "broadcast", "pingpong"};
    for (int op = 0; op < 4; ++op) {
      std::vector<double> t;
      for (int i = -2; i < reps; ++i) {
        Status st = c.AllReduceSum(g.data(), 1);  // line up
        const auto t0 = std::chrono::steady_clock::now();
        if (op == 0) st = c.AllReduceSum(a.data(), n);
        if (op == 1) st = c.AllGather(a.data(), n, g.data());
        if (op == 2) st = c.Broadcast(a.data(), n * sizeof(float), 0);
        if (op == 3 && c.size() > 1) {
          // Rank 0 <-> rank 1 round trip; half of it is one message.
          if (r == 0) {
            st = c.Send(a.data(), n * sizeof(float), 1);
            if (st.ok()) st = c.Recv(a.data(), n * sizeof(float), 1);
          } else if (r == 1) {
            st = c.Recv(a.data(), n * sizeof(float), 0);
            if (st.ok()) st = c.Send(a.data(), n * sizeof(float), 0);
          }
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (op == 3) s /= 2;
        if (!st.ok()) {
          std::fprintf(stderr, "comm_bench: %s\n", st.ToString().c_str());
          return;
        }
        if (i >= 0) t.push_back(s);
      }
      const double med = Median(t);
      if (r == 0) {
        std::printf("| %-10s | %10zu | %12.1f | %10.1f |\n", names[op], n * sizeof(float), med * 1e6,
                    n * sizeof(float) / med / 1e6);
      }
    }
  }
}

}  // namespace
}  // namespace infera

int main(int argc, char** argv) {
  int reps = 50, threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: comm_bench [--reps N] [--threads N]\n");
      return 2;
    }
  }
  if (threads > 0) {
    auto comms = infera::MakeLocalCommunicators(threads);
    std::vector<std::thread> th;
    for (int r = 0; r < threads; ++r) th.emplace_back([&, r] { infera::RunAll(*comms[r], reps); });
    for (auto& t : th) t.join();
    return 0;
  }
  auto rt = infera::MpiRuntime::Init();
  if (!rt.ok()) {
    std::fprintf(stderr, "comm_bench: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  infera::RunAll((*rt)->world(), reps);
  return 0;
}
