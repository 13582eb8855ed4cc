#include "engine/generator.h"

#include <fmt/format.h>

#include "engine/stop_checker.h"
#include "sampling/sampler.h"

namespace infera {
namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

Generator::Generator(const Model& model, const Tokenizer* tokenizer, const KernelTable& kernels, ThreadPool& pool,
                     int32_t n_ctx, int32_t n_batch, KvType kv_type)
    : model_(model), tok_(tokenizer), runner_(model, kernels, pool, n_ctx), n_ctx_(n_ctx), n_batch_(n_batch),
      kv_(model.config.n_layer, n_ctx, model.config.kv_dim(), kv_type, model.config.head_dim), slot_pool_(n_ctx) {}

void Generator::Reset() {
  slot_pool_.Release(&slots_);
  history_.clear();
}

void Generator::Truncate(int32_t n) {
  if (n < 0) n = 0;
  if (n >= n_past()) return;
  slot_pool_.Truncate(&slots_, n);
  history_.resize(n);
}

Status Generator::FeedImpl(const std::vector<int32_t>& tokens, int32_t first_logit, std::vector<float>* out) {
  const bool all_logits = first_logit >= 0;
  if (tokens.empty()) return InvalidArgument("nothing to feed");
  if (n_past() + static_cast<int32_t>(tokens.size()) > n_ctx_) {
    return OutOfRange(fmt::format("{} tokens do not fit: {} of the context's {} are used", tokens.size(), n_past(), n_ctx_));
  }
  const int32_t V = model_.config.n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= V) return InvalidArgument(fmt::format("token id {} out of range [0, {})", t, V));
  }
  if (all_logits) out->clear();
  for (size_t start = 0; start < tokens.size(); start += n_batch_) {
    const size_t end = std::min(tokens.size(), start + n_batch_);
    RETURN_IF_ERROR(slot_pool_.Extend(&slots_, static_cast<int32_t>(end - start)));
    batch_.Clear();
    batch_.seq_slots.push_back(&slots_);
    for (size_t i = start; i < end; ++i) {
      const bool want = all_logits ? static_cast<int32_t>(i) >= first_logit : i + 1 == tokens.size();
      batch_.Add(tokens[i], n_past(), 0, want);
      history_.push_back(tokens[i]);
    }
    Status st = runner_.Forward(batch_, kv_, &logits_);
    if (!st.ok()) {
      // Roll back this chunk so the sequence stays consistent.
      const int32_t keep = n_past() - static_cast<int32_t>(end - start);
      history_.resize(keep);
      slot_pool_.Truncate(&slots_, keep);
      return st;
    }
    if (all_logits) out->insert(out->end(), logits_.begin(), logits_.end());
  }
  if (!all_logits) *out = logits_;
  return Status::Ok();
}

Status Generator::Feed(const std::vector<int32_t>& tokens, std::vector<float>* last_logits) {
  return FeedImpl(tokens, -1, last_logits);
}

Status Generator::FeedAllLogits(const std::vector<int32_t>& tokens, std::vector<float>* all_logits) {
  return FeedImpl(tokens, 0, all_logits);
}

Status Generator::FeedLogitsFrom(const std::vector<int32_t>& tokens, int32_t first, std::vector<float>* logits) {
  if (first < 0 || first >= static_cast<int32_t>(tokens.size())) return InvalidArgument("first logit row out of range");
  return FeedImpl(tokens, first, logits);
}

StatusOr<GenerateResult> Generator::Generate(const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                            const std::function<void(const std::string&)>& on_text,
                                            bool echo_started) {
  RETURN_IF_ERROR(ValidateSamplingParams(opts.sampling));
  if (prompt.empty()) return InvalidArgument("empty prompt (it needs at least a BOS token)");
  if (n_past() + static_cast<int32_t>(prompt.size()) > n_ctx_) {
    return OutOfRange(fmt::format("the prompt has {} tokens but the context holds {} ({} already used); raise -c or shorten the prompt",
                                  prompt.size(), n_ctx_, n_past()));
  }
  GenerateResult res;
  Sampler sampler(opts.sampling);
  StopChecker stops(opts.stop);
  std::unique_ptr<StreamDecoder> dec;
  if (tok_) dec = std::make_unique<StreamDecoder>(*tok_, !echo_started);
  const int32_t V = model_.config.n_vocab;

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  RETURN_IF_ERROR(Feed(prompt, &logits));
  auto t1 = std::chrono::steady_clock::now();
  res.prompt_tokens = static_cast<int32_t>(prompt.size());
  res.prompt_seconds = Seconds(t0, t1);

  auto is_eog = [&](int32_t id) {
    if (tok_ && tok_->vocab().IsEog(id)) return true;
    for (int32_t e : opts.extra_eog) if (e == id) return true;
    return false;
  };
  bool stopped_by_string = false;
  for (;;) {
    if (opts.max_tokens >= 0 && static_cast<int32_t>(res.tokens.size()) >= opts.max_tokens) {
      res.finish = FinishReason::kLength;
      break;
    }
    if (opts.cancel != nullptr && opts.cancel->load(std::memory_order_relaxed)) {
      res.finish = FinishReason::kCancelled;
      break;
    }
    const int32_t next = sampler.Sample(logits.data(), V, history_);
    if (!opts.ignore_eos && is_eog(next)) {
      res.finish = FinishReason::kStop;
      break;
    }
    res.tokens.push_back(next);
    if (dec) {
      bool stopped = false;
      std::string text = stops.Push(dec->Push(next), &stopped);
      if (!text.empty() && on_text) on_text(text);
      if (stopped) {
        res.finish = FinishReason::kStop;
        stopped_by_string = true;
        break;
      }
    }
    if (opts.max_tokens >= 0 && static_cast<int32_t>(res.tokens.size()) >= opts.max_tokens) {
      res.finish = FinishReason::kLength;
      break;
    }
    if (n_past() >= n_ctx_) {
      res.finish = FinishReason::kContextFull;
      break;
    }
    RETURN_IF_ERROR(Feed({next}, &logits));
  }
  if (dec && !stopped_by_string) {
    // Release held-back bytes; a stop string may still complete in them.
    bool stopped = false;
    std::string tail = stops.Push(dec->Flush(), &stopped);
    if (!stopped) tail += stops.Flush();
    if (!tail.empty() && on_text) on_text(tail);
  }
  res.gen_seconds = Seconds(t1, std::chrono::steady_clock::now());
  return res;
}

}  // namespace infera
