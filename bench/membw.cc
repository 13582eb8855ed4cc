// STREAM-like memory bandwidth: copy (a = b), triad (a = b + s c) and read
// (sum of a), with 1 and N threads, so performance tables can state the
// machine's bound. Arrays are much larger than the caches.
//   build/bench/membw [--mb 256] [--reps 7] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 256;
  int reps = 7, threads = infera::ThreadPool::DefaultThreadCount();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mb")) mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  const size_t n = mb * (1u << 20) / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  std::mutex sink_mu;  // one lock per chunk, not per element
  double sink = 0;
  std::printf("membw: 3 arrays of %zu MiB, median of %d repetitions (GB/s = 1e9 bytes/s)\n", mb, reps);
  std::printf("| threads | copy GB/s | triad GB/s | read GB/s |\n|---|---|---|---|\n");
  for (int t : {1, threads}) {
    infera::ThreadPool pool(t);
    auto run = [&](auto&& body) {
      std::vector<double> secs;
      for (int r = 0; r < reps; ++r) {
        const double t0 = Now();
        pool.ParallelFor(static_cast<int64_t>(n), 4096, [&](int64_t lo, int64_t hi) { body(lo, hi); });
        secs.push_back(Now() - t0);
      }
      return Median(secs);
    };
    const double copy = run([&](int64_t lo, int64_t hi) { std::memcpy(&a[lo], &b[lo], (hi - lo) * sizeof(float)); });
    const double triad = run([&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    // Integer sums (which compilers vectorize) in 16 independent lanes: the
    // loop is bound by memory, not by an add's latency (float sums in 4
    // chains read 24 GB/s per core here, half of what decode attains).
    const double read = run([&](int64_t lo, int64_t hi) {
      uint32_t s[16] = {};
      const auto* w = reinterpret_cast<const uint32_t*>(&a[0]);
      for (int64_t i = lo; i + 15 < hi; i += 16) {
        for (int k = 0; k < 16; ++k) s[k] ^= w[i + k];
      }
      uint32_t x = 0;
      for (uint32_t v : s) x ^= v;
      std::lock_guard<std::mutex> lock(sink_mu);
      sink += x;
    });
    const double bytes = static_cast<double>(n) * sizeof(float);
    std::printf("| %d | %.1f | %.1f | %.1f |\n", t, 2 * bytes / copy / 1e9, 3 * bytes / triad / 1e9, bytes / read / 1e9);
    if (t == threads) break;
  }
  if (sink == 12345.678) std::printf("\n");  // keep the reads observable
  return 0;
}
