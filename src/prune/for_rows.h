// Row-sliced parallel loops for the pruning math (src/prune only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace infera::prune {

// Runs fn(r0, r1) over [0, rows) on up to `threads` threads (at least 8 rows
// each), in contiguous slices; returns when all are done.
template <typename Fn>
void ForRows(int64_t rows, int threads, Fn&& fn) {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(threads, rows / 8));
  if (n == 1) {
    fn(int64_t{0}, rows);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (rows + n - 1) / n;
  for (int64_t t = 1; t < n; ++t) pool.emplace_back([&, t] { fn(std::min(rows, t * per), std::min(rows, (t + 1) * per)); });
  fn(0, std::min(rows, per));
  for (auto& th : pool) th.join();
}

}  // namespace infera::prune
