// Splitting a matrix's rows over short-lived threads, for the calibrated
// solvers (GPTQ, AWQ) whose per-row work runs between BLAS calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace infera {

// fn(r0, r1) for tiles [r0, r1) of `tile` rows covering [0, rows), dealt
// round-robin to min(threads, tiles) threads (the caller is one of them);
// returns when all are done. fn must be safe to call concurrently on
// different tiles.
template <typename Fn>
void ForRowTiles(int64_t rows, int64_t tile, int threads, Fn&& fn) {
  const int64_t n_tiles = (rows + tile - 1) / tile;
  const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n_tiles)));
  auto work = [&](int t) {
    for (int64_t i = t; i < n_tiles; i += n) fn(i * tile, std::min(rows, (i + 1) * tile));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
}

}  // namespace infera
