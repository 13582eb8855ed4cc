#include "scheduler/scheduler.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/check.h"

namespace infera {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockManager* blocks) : cfg_(cfg), blocks_(blocks) {
  CHECK(cfg_.max_batched_tokens > 0 && cfg_.max_num_seqs > 0);
}

Status Scheduler::Check(size_t prompt_len, int32_t max_tokens) const {
  if (prompt_len == 0) return InvalidArgument("the prompt is empty");
  const int64_t total = static_cast<int64_t>(prompt_len) + max_tokens;
  if (max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  if (total > cfg_.max_model_len && (!cfg_.context_shift || static_cast<int64_t>(prompt_len) >= cfg_.max_model_len)) {
    return OutOfRange(fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens",
                                       prompt_len, max_tokens, cfg_.max_model_len));
  }
  if (blocks_->BlocksFor(static_cast<int32_t>(std::min<int64_t>(total, cfg_.max_model_len))) > blocks_->num_blocks()) {
    return ResourceExhausted(fmt::format("prompt + max_tokens ({} tokens) needs more KV blocks than the cache holds "
                                       "({} blocks of {})", total, blocks_->num_blocks(), blocks_->block_size()));
  }
  return Status::Ok();
}

Status Scheduler::Add(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority,
                      int32_t max_cached, uint64_t cache_root) {
  if (Has(id)) return InvalidArgument(fmt::format("request {} already exists", id));
  RETURN_IF_ERROR(Check(prompt.size(), max_tokens));
  Seq s;
  s.id = id;
  s.priority = priority;
  s.arrival = next_arrival_++;
  s.prompt_len = static_cast<int32_t>(prompt.size());
  s.tokens = std::move(prompt);
  s.max_tokens = max_tokens;
  s.max_cached = std::max(0, max_cached);
  s.cache_root = cache_root;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return Status::Ok();
}

void Scheduler::SortByPriority(std::vector<uint64_t>* ids) const {
  std::stable_sort(ids->begin(), ids->end(), [&](uint64_t a, uint64_t b) { return Before(seqs_.at(a), seqs_.at(b)); });
}

int32_t Scheduler::num_preempted_waiting() const {
  int32_t n = 0;
  for (uint64_t id : waiting_) n += seqs_.at(id).admitted_once ? 1 : 0;
  return n;
}

void Scheduler::Preempt(uint64_t id) {
  Seq& s = seqs_.at(id);
  blocks_->Free(id);
  s.computed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_back(id);
  ++num_preemptions_;
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int32_t budget = cfg_.max_batched_tokens;
  SortByPriority(&running_);
  const std::vector<uint64_t> order = running_;
  std::set<uint64_t> gone;
  for (uint64_t id : order) {
    if (budget == 0) break;
    if (gone.count(id)) continue;
    Seq& s = seqs_.at(id);
    const int32_t n = std::min(static_cast<int32_t>(s.tokens.size()) - s.computed, budget);
    if (n <= 0) continue;
    bool preempted_self = false;
    while (!blocks_->Grow(id, s.computed + n)) {
      // Out of blocks: the lowest-priority, latest-arrived running sequence
      // goes (never one scheduled before this one: those rank higher).
      CHECK(!cfg_.guaranteed_admission);
      const uint64_t victim = running_.back();
      Preempt(victim);
      gone.insert(victim);
      out.preempted.push_back(victim);
      if (victim == id) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;
    const bool last = s.computed + n == static_cast<int32_t>(s.tokens.size());
    out.chunks.push_back({id, s.computed, n, last, {}});
    budget -= n;
    out.num_tokens += n;
    if (last && n == 1 && !s.draft.empty()) {
      // Drafts only where they fit the budget, the context and free blocks,
      // never preempting for them nor taking a block that a running sequence
      // may need for its own token this step (a block each is kept back).
      const int32_t len = static_cast<int32_t>(s.tokens.size());
      int32_t k = std::min({static_cast<int32_t>(s.draft.size()), budget, cfg_.max_model_len - len});
      const int32_t reserve = static_cast<int32_t>(running_.size());
      while (k > 0 && (blocks_->BlocksNeeded(id, len + k) > blocks_->num_free_blocks() - reserve ||
                       !blocks_->Grow(id, len + k))) {
        --k;
      }
      if (k > 0) {
        out.chunks.back().draft.assign(s.draft.begin(), s.draft.begin() + k);
        budget -= k;
        out.num_tokens += k;
      }
    }
  }
  // Drafts are for this step only.
  for (uint64_t id : drafted_) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) it->second.draft.clear();
  }
  drafted_.clear();
  // New (or preempted) sequences join only when nothing had to be preempted.
  if (out.preempted.empty()) {
    SortByPriority(&waiting_);
    while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < cfg_.max_num_seqs) {
      const uint64_t id = waiting_.front();
      Seq& s = seqs_.at(id);
      const int32_t len = static_cast<int32_t>(s.tokens.size());
      if (!blocks_->Has(id)) {
        // At least the last token is computed, for its logits.
        s.computed = blocks_->StartWithPrefix(id, s.tokens, std::min(len - 1, s.max_cached), s.cache_root);
        if (!s.admitted_once) s.cached = s.computed;
      }
      const int32_t n = std::min(len - s.computed, budget);
      const int32_t reserve = cfg_.guaranteed_admission ? std::min(s.prompt_len + s.max_tokens, cfg_.max_model_len)
                                                        : s.computed + n;
      if (!blocks_->Grow(id, reserve)) {
        blocks_->Free(id);  // waits, in order, for blocks to come back
        s.computed = 0;
        break;
      }
      s.admitted_once = true;
      waiting_.erase(waiting_.begin());
      running_.push_back(id);
      out.chunks.push_back({id, s.computed, n, s.computed + n == len, {}});
      budget -= n;
      out.num_tokens += n;
    }
  }
  return out;
}

void Scheduler::Computed(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    auto it = seqs_.find(c.id);
    if (it == seqs_.end()) continue;  // finished meanwhile
    Seq& s = it->second;
    s.computed = c.start + c.n;
    if (!(c.n == 1 && c.start >= s.prompt_len)) prefill_computed_ += c.n;
    blocks_->Commit(c.id, s.tokens, s.computed);
    ReleaseOutsideWindow(s);
  }
}

void Scheduler::ReleaseOutsideWindow(const Seq& s) {
  // The next token (position s.computed) sees positions from
  // s.computed - window + 1 on; later ones see less.
  if (cfg_.sliding_window > 0) blocks_->ReleaseBefore(s.id, s.computed - cfg_.sliding_window + 1);
}

void Scheduler::Shift(uint64_t id, int32_t keep) {
  Seq& s = seqs_.at(id);
  const int32_t len = static_cast<int32_t>(s.tokens.size());
  keep = std::clamp(keep, 0, len - 1);
  const int32_t discard = std::max(1, (len - keep) / 2);
  s.tokens.erase(s.tokens.begin() + keep, s.tokens.begin() + keep + discard);
  s.prompt_len = std::min(s.prompt_len, static_cast<int32_t>(s.tokens.size()));
  blocks_->Free(id);  // recomputed at the next steps (chunked, like a prompt)
  s.computed = 0;
}

uint64_t Scheduler::TokensHeld() const {
  uint64_t n = 0;
  for (uint64_t id : running_) n += static_cast<uint64_t>(seqs_.at(id).computed);
  return n;
}

void Scheduler::Append(uint64_t id, int32_t token, bool kv_computed) {
  Seq& s = seqs_.at(id);
  if (kv_computed) CHECK(s.computed == static_cast<int32_t>(s.tokens.size()));
  s.tokens.push_back(token);
  if (kv_computed) {
    ++s.computed;
    blocks_->Commit(id, s.tokens, s.computed);
    ReleaseOutsideWindow(s);
  }
}

void Scheduler::SetDraft(uint64_t id, std::vector<int32_t> draft) {
  seqs_.at(id).draft = std::move(draft);
  drafted_.push_back(id);
}

bool Scheduler::IsDecoding(uint64_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !blocks_->Has(id)) return false;
  const Seq& s = it->second;
  const int32_t len = static_cast<int32_t>(s.tokens.size());
  return len > s.prompt_len && s.computed == len - 1 &&
         std::find(running_.begin(), running_.end(), id) != running_.end();
}

void Scheduler::Finish(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  blocks_->Free(id);
  auto r = std::find(running_.begin(), running_.end(), id);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), id);
  if (w != waiting_.end()) waiting_.erase(w);
  seqs_.erase(it);
}

}  // namespace infera
