#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace infera {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) return InvalidArgument("temperature must be >= 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) return InvalidArgument("repetition penalty must be > 0");
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) return InvalidArgument("penalties must be finite");
  if (p.penalty_last_n < -1) return InvalidArgument("penalty_last_n must be >= -1");
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  if (p.has_seed) {
    rng_.seed(p.seed);
  } else {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::ApplyPenalties(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) {
  if (p_.repetition_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f) return;
  const size_t n = p_.penalty_last_n < 0 ? history.size()
                                         : std::min<size_t>(history.size(), static_cast<size_t>(p_.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  for (const auto& [id, c] : counts) {
    if (id < 0 || id >= n_vocab) continue;
    float& l = logits[id];
    if (p_.repetition_penalty != 1.0f) l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    l -= static_cast<float>(c) * p_.frequency_penalty + (c > 0 ? p_.presence_penalty : 0.0f);
  }
}

int32_t Sampler::Sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) {
  ApplyPenalties(logits, n_vocab, history);
  last_n_ = 0;
  if (p_.temperature == 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; ++i) if (logits[i] > logits[best]) best = i;
    return best;
  }
  cands_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) cands_[i] = {i, logits[i], 0.0f};
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  size_t n = cands_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(cands_.begin(), cands_.begin() + p_.top_k, cands_.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(cands_.begin(), cands_.end(), by_logit);
  }
  auto softmax = [&](size_t m, float temp) {
    const float mx = cands_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < m; ++i) {
      cands_[i].p = std::exp((cands_[i].logit - mx) / temp);
      sum += cands_[i].p;
    }
    for (size_t i = 0; i < m; ++i) cands_[i].p = static_cast<float>(cands_[i].p / sum);
  };
  softmax(n, 1.0f);
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cands_[i].p;
      if (cum >= p_.top_p) { keep = i + 1; break; }
    }
    n = std::max<size_t>(keep, 1);
  }
  if (p_.min_p > 0.0f) {
    const float thr = cands_[0].p * p_.min_p;
    size_t keep = 1;
    while (keep < n && cands_[keep].p >= thr) ++keep;
    n = keep;
  }
  softmax(n, p_.temperature);
  last_n_ = n;
  const double u = Uniform();
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += cands_[i].p;
    if (u < cum) return cands_[i].id;
  }
  return cands_[n - 1].id;
}

void Sampler::LastDistribution(int32_t token, int32_t k, float* logprob, std::vector<std::pair<int32_t, float>>* top,
                               int32_t* rank) const {
  top->clear();
  *rank = 1;
  if (last_n_ == 0) {  // greedy: all of the probability on the argmax
    *logprob = 0.0f;
    if (k > 0) top->emplace_back(token, 0.0f);
    return;
  }
  // cands_[0, last_n_) are sorted by logit, so by probability too.
  // (The lowest float, not -inf, for a token of probability 0: the draw's
  // last resort when rounding left u above the sum.)
  *logprob = std::numeric_limits<float>::lowest();
  float p_token = 0.0f;
  for (size_t i = 0; i < last_n_; ++i) {
    if (cands_[i].id == token) {
      p_token = cands_[i].p;
      if (p_token > 0.0f) *logprob = std::log(p_token);
      break;
    }
  }
  for (size_t i = 0; i < last_n_; ++i) *rank += cands_[i].p > p_token ? 1 : 0;
  for (size_t i = 0; i < last_n_ && top->size() < static_cast<size_t>(std::max(k, 0)); ++i) {
    if (cands_[i].p > 0.0f) top->emplace_back(cands_[i].id, std::log(cands_[i].p));
  }
}

}  // namespace infera
