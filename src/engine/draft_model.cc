#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>

#include "base/logging.h"

namespace infera {
namespace {

constexpr int32_t kCatchUpChunk = 512;  // tokens per draft forward pass when catching up

// The most likely token of logits row [n] and its probability.
int32_t Greedy(const float* row, int32_t n, float* p_top) {
  const int32_t best = static_cast<int32_t>(std::max_element(row, row + n) - row);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - row[best]);
  *p_top = static_cast<float>(1.0 / sum);
  return best;
}

}  // namespace

DraftModelProposer::DraftModelProposer(const Model& model, const KernelTable& kernels, ThreadPool& pool,
                                       int32_t n_slots, int32_t block_size, int32_t max_model_len, int32_t context)
    : runner_(MakeModelRunner(model, kernels, pool, max_model_len)),
      kv_(model.config.KvHeadsPerLayer(), n_slots / block_size * block_size, model.config.head_dim),
      blocks_(n_slots / block_size, block_size, /*prefix_caching=*/false),
      max_model_len_(max_model_len),
      context_(context),
      n_vocab_(model.config.n_vocab) {
  LOG_INFO("engine: draft model {} ({} layers, {} embedding), its KV cache {:.1f} MiB for {} tokens", model.path,
           model.config.n_layer, model.config.n_embd, kv_.bytes() / 1048576.0, n_slots / block_size * block_size);
}

bool DraftModelProposer::Run(const std::vector<uint64_t>& ids) {
  Status st = runner_->Forward(batch_, kv_, &logits_);
  if (st.ok()) return true;
  LOG_WARN("draft model forward pass failed ({}); no drafts this step", st.ToString());
  for (uint64_t id : ids) Forget(id);
  return false;
}

std::vector<std::vector<int32_t>> DraftModelProposer::Propose(const std::vector<Want>& wants, float p_min) {
  std::vector<std::vector<int32_t>> drafts(wants.size());
  // Room in the draft cache for the tokens and all but the last draft.
  std::vector<size_t> live;
  for (size_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    const int32_t len = static_cast<int32_t>(w.tokens->size());
    const int32_t k = std::min(w.max_draft, max_model_len_ - len + 1);
    if (k < 1) continue;
    auto it = seen_.find(w.id);
    int32_t window = context_;
    if (w.max_catch_up > 0) window = window > 0 ? std::min(window, w.max_catch_up) : w.max_catch_up;
    if (window > 0 && (it == seen_.end() || len - it->second.computed > window)) {
      // New, or too far behind: start again on the last `window` tokens.
      Forget(w.id);
      it = seen_.emplace(w.id, Seen{std::max(0, len - window), std::max(0, len - window)}).first;
    } else if (it == seen_.end()) {
      it = seen_.emplace(w.id, Seen{}).first;
    }
    if (!blocks_.Grow(w.id, len - it->second.start + k - 1)) {
      Forget(w.id);
      continue;
    }
    live.push_back(i);
  }
  // Catch up to each sequence's newest token (in chunks), then its first draft.
  std::vector<size_t> pending = live;
  while (!pending.empty()) {
    batch_.Clear();
    std::vector<uint64_t> ids;
    std::vector<size_t> last_row_of;  // wants index of each logits row
    int32_t budget = kCatchUpChunk;
    std::vector<size_t> next;
    for (size_t i : pending) {
      const Want& w = wants[i];
      const int32_t len = static_cast<int32_t>(w.tokens->size());
      const int32_t start = seen_[w.id].start;
      int32_t& done = seen_[w.id].computed;
      if (budget == 0) {
        next.push_back(i);
        continue;
      }
      const int32_t s = static_cast<int32_t>(batch_.seq_slots.size());
      batch_.seq_slots.push_back(&blocks_.Slots(w.id));
      ids.push_back(w.id);
      const int32_t n = std::min(len - done, budget);
      for (int32_t p = done; p < done + n; ++p) {
        const bool last = p == len - 1;
        batch_.Add((*w.tokens)[p], p - start, s, last);
        if (last) last_row_of.push_back(i);
      }
      budget -= n;
      done += n;
      if (done < len) next.push_back(i);
    }
    if (!Run(ids)) return std::vector<std::vector<int32_t>>(wants.size());
    for (size_t r = 0; r < last_row_of.size(); ++r) {
      float p_top = 0;
      const int32_t t = Greedy(logits_.data() + r * static_cast<size_t>(n_vocab_), n_vocab_, &p_top);
      if (p_top >= p_min) drafts[last_row_of[r]].push_back(t);
    }
    pending = std::move(next);
  }
  // Then one draft position at a time, for every sequence still drafting.
  for (int32_t step = 1;; ++step) {
    batch_.Clear();
    std::vector<uint64_t> ids;
    std::vector<size_t> rows;
    for (size_t i : live) {
      const Want& w = wants[i];
      if (static_cast<int32_t>(drafts[i].size()) != step || step >= std::min(w.max_draft, max_model_len_ - static_cast<int32_t>(w.tokens->size()) + 1)) {
        continue;
      }
      Seen& seen = seen_[w.id];
      const int32_t index = static_cast<int32_t>(w.tokens->size()) + step - 1;  // of the drafted token
      const int32_t s = static_cast<int32_t>(batch_.seq_slots.size());
      batch_.seq_slots.push_back(&blocks_.Slots(w.id));
      batch_.Add(drafts[i].back(), index - seen.start, s, true);
      ids.push_back(w.id);
      rows.push_back(i);
      seen.computed = index + 1;
    }
    if (rows.empty()) break;
    if (!Run(ids)) return std::vector<std::vector<int32_t>>(wants.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      float p_top = 0;
      const int32_t t = Greedy(logits_.data() + r * static_cast<size_t>(n_vocab_), n_vocab_, &p_top);
      if (p_top >= p_min) drafts[rows[r]].push_back(t);
    }
  }
  return drafts;
}

void DraftModelProposer::Keep(uint64_t id, int32_t valid) {
  auto it = seen_.find(id);
  if (it != seen_.end()) it->second.computed = std::max(it->second.start, std::min(it->second.computed, valid));
}

void DraftModelProposer::Forget(uint64_t id) {
  seen_.erase(id);
  blocks_.Free(id);
}

}  // namespace infera
