#include "model/block_input_cache.h"

#include <cstring>

#include "base/check.h"

namespace infera {

void BlockInputCache::StartRun(Mode mode, int block, int stop_before) {
  CHECK(block >= 0 && block <= stop_before);
  mode_ = mode;
  block_ = mode == Mode::kResume || mode == Mode::kResumeAndKeep ? block : 0;
  stop_before_ = mode == Mode::kResumeAndKeep ? stop_before : INT_MAX;
  pass_ = 0;
  if (mode == Mode::kResume || mode == Mode::kResumeAndKeep) unmatched_ = 0;
  if (mode == Mode::kKeep) kept_.clear();
}

int BlockInputCache::ResumeAt(float* x, int64_t rows, int64_t width) {
  if (mode_ == Mode::kOff) return 0;
  const size_t pass = pass_++;
  const bool keeping = mode_ == Mode::kKeep || mode_ == Mode::kResumeAndKeep;
  if (keeping && kept_.size() <= pass) kept_.resize(pass + 1);
  if (block_ > 0) {
    // The same pass of a kept run: the same embedded tokens, and the block kept.
    const size_t n = static_cast<size_t>(rows * width);
    if (pass < kept_.size() && kept_[pass].size() > static_cast<size_t>(block_) && kept_[pass][0].size() == n &&
        kept_[pass][block_].size() == n && std::memcmp(kept_[pass][0].data(), x, n * sizeof(float)) == 0) {
      std::memcpy(x, kept_[pass][block_].data(), n * sizeof(float));
      if (keeping) {
        // Blocks from stop_before on were not run: what was kept there may
        // predate changes before them. Runs that keep go forward: the
        // inputs between block 0 (kept to match passes) and this one are
        // not needed again.
        std::vector<std::vector<float>>& blocks = kept_[pass];
        if (blocks.size() > static_cast<size_t>(stop_before_)) blocks.resize(stop_before_);
        for (int b = 1; b < block_; ++b) std::vector<float>().swap(blocks[b]);
      }
      return block_;
    }
    ++unmatched_;
  }
  if (keeping) kept_[pass].clear();
  return 0;
}

void BlockInputCache::BlockInput(int b, const float* x, int64_t rows, int64_t width) {
  if (mode_ != Mode::kKeep && mode_ != Mode::kResumeAndKeep) return;
  auto& blocks = kept_[pass_ - 1];
  // Blocks run in order from the start block, whose predecessors are kept.
  CHECK(blocks.size() >= static_cast<size_t>(b));
  if (blocks.size() == static_cast<size_t>(b)) blocks.emplace_back();
  blocks[b].assign(x, x + rows * width);
}

size_t BlockInputCache::bytes() const {
  size_t n = 0;
  for (const auto& pass : kept_) {
    for (const auto& b : pass) n += b.size() * sizeof(float);
  }
  return n;
}

}  // namespace infera
