#include "model/block_input_cache.h"

#include <cstring>

#include "base/check.h"

namespace infera {

void BlockInputCache::StartRun(Mode mode, int block) {
  mode_ = mode;
  block_ = block;
  pass_ = 0;
  if (mode == Mode::kResume) unmatched_ = 0;
  if (mode == Mode::kKeep) kept_.clear();
}

int BlockInputCache::ResumeAt(float* x, int64_t rows, int64_t width) {
  if (mode_ != Mode::kResume || block_ == 0) return 0;
  const size_t n = static_cast<size_t>(rows * width);
  const size_t pass = pass_++;
  // The same pass of the kept run: the same embedded tokens, and the block kept.
  if (pass >= kept_.size() || kept_[pass].size() <= static_cast<size_t>(block_) || kept_[pass][0].size() != n ||
      std::memcmp(kept_[pass][0].data(), x, n * sizeof(float)) != 0) {
    ++unmatched_;
    return 0;
  }
  std::memcpy(x, kept_[pass][block_].data(), n * sizeof(float));
  return block_;
}

void BlockInputCache::BlockInput(int b, const float* x, int64_t rows, int64_t width) {
  if (mode_ != Mode::kKeep) return;
  if (b == 0) kept_.emplace_back();  // a pass starts (kept runs start every pass at block 0)
  auto& blocks = kept_.back();
  CHECK(blocks.size() == static_cast<size_t>(b));
  blocks.emplace_back(x, x + rows * width);
}

size_t BlockInputCache::bytes() const {
  size_t n = 0;
  for (const auto& pass : kept_) {
    for (const auto& b : pass) n += b.size() * sizeof(float);
  }
  return n;
}

}  // namespace infera
