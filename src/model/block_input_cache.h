// Forward passes that start part-way and stop early, for calibration:
// mixed-precision planning (quantize --target-bpw) measures each candidate
// type of a tensor with passes that start at the tensor's block; the
// layer-by-layer algorithms (GPTQ, AWQ, Wanda, SparseGPT) collect layer l's
// inputs with passes that run layers l - 1 and l only.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/activation_observer.h"

namespace infera {

// The residual stream at block inputs, pass after pass (a ResidualTap). A
// run is one sequence of forward passes; passes are matched with the kept
// ones by their order within the run and checked by their embedded tokens:
// a pass that does not match runs from block 0. Thread-compatible (one
// Forward at a time).
class BlockInputCache : public ResidualTap {
 public:
  enum class Mode {
    kOff,     // runs every block, keeps nothing
    kKeep,    // runs every block, keeps every block's input (drops the rest)
    kResume,  // starts at `block` from the kept inputs
    // Starts at `block`, stops before `stop_before`, and keeps the inputs of
    // the blocks it ran: a pass then holds block 0 and blocks
    // [block, stop_before) (runs go forward: what lies between is dropped).
    kResumeAndKeep,
  };
  // Starts a run. Resuming at `block` is exact when no weight before that
  // block has changed since its input was kept.
  void StartRun(Mode mode, int block = 0, int stop_before = INT_MAX);
  int ResumeAt(float* x, int64_t rows, int64_t width) override;
  int StopBefore() const override { return stop_before_; }
  void BlockInput(int b, const float* x, int64_t rows, int64_t width) override;
  // Passes of the last resuming run (kResume, kResumeAndKeep; until the
  // next one starts) that asked for a block > 0 but ran from block 0
  // because no kept pass matched.
  int unmatched() const { return unmatched_; }
  // Bytes kept.
  size_t bytes() const;

 private:
  Mode mode_ = Mode::kOff;
  int block_ = 0;
  int stop_before_ = INT_MAX;
  size_t pass_ = 0;  // passes started in this run
  int unmatched_ = 0;
  // kept_[pass][b]: block b's input [rows, width] of that pass (b = 0: the
  // embedded tokens).
  std::vector<std::vector<std::vector<float>>> kept_;
};

}  // namespace infera
