// Forward passes that start part-way, for calibration: mixed-precision
// planning (quantize --target-bpw) measures each candidate type of a tensor
// with passes that start at the tensor's block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/activation_observer.h"

namespace infera {

// The residual stream at every block's input, pass after pass (a
// ResidualTap): kept during one run of passes, then used to start later runs
// of the same passes at a given block. Forward passes are matched by
// their order within a run and checked by their embedded tokens; a pass that
// does not match runs whole. Thread-compatible (one Forward at a time).
class BlockInputCache : public ResidualTap {
 public:
  enum class Mode { kOff, kKeep, kResume };
  // Starts a run: kKeep drops what was kept and keeps this run's streams;
  // kResume starts each pass at `block` (blocks before it must be unchanged
  // since the kept run).
  void StartRun(Mode mode, int block = 0);
  int ResumeAt(float* x, int64_t rows, int64_t width) override;
  void BlockInput(int b, const float* x, int64_t rows, int64_t width) override;
  // Passes of the last kResume run that ran whole because they did not
  // match (kept until the next kResume run starts).
  int unmatched() const { return unmatched_; }
  // Bytes kept.
  size_t bytes() const;

 private:
  Mode mode_ = Mode::kOff;
  int block_ = 0;
  size_t pass_ = 0;  // the pass now running, within the run
  int unmatched_ = 0;
  // kept_[pass][b]: block b's input [rows, width] of that pass (b = 0: the
  // embedded tokens).
  std::vector<std::vector<std::vector<float>>> kept_;
};

}  // namespace infera
