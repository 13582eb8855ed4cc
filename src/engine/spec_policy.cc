#include "engine/spec_policy.h"

#include <algorithm>

namespace infera {
namespace {

// An exponential average with weight w; the first observation sets it.
void Average(double w, double x, double* v, bool* have) {
  *v = *have ? *v + w * (x - *v) : x;
  *have = true;
}

}  // namespace

void AcceptanceEstimate::Verified(int32_t drafted, int32_t accepted) {
  Forget();
  hits_ += accepted;
  trials_ += accepted + (accepted < drafted ? 1 : 0);
}

void AcceptanceEstimate::Forget() {
  hits_ *= kDecay;
  trials_ *= kDecay;
}

void StepCostModel::Observe(int32_t tokens, double seconds) {
  if (tokens < 1 || !(seconds > 0)) return;
  if (tokens == 1) {
    Average(kWeight, seconds, &t1_, &have_t1_);
  } else if (have_t1_) {
    // Starts from the prior, so that one slow first step (caches, scratch
    // growing) does not decide alone.
    if (!have_per_token_) per_token_ = kPriorRatio * t1_;
    have_per_token_ = true;
    Average(kWeight, std::max(0.0, seconds - t1_) / (tokens - 1), &per_token_, &have_per_token_);
  }
}

double StepCostModel::marginal_ratio() const {
  if (!have_t1_ || !have_per_token_ || t1_ <= 0) return kPriorRatio;
  return std::clamp(per_token_ / t1_, 0.01, 4.0);
}

void StepCostModel::ObserveDraft(int32_t positions, double seconds) {
  if (positions < 1 || !(seconds >= 0)) return;
  Average(kWeight, seconds / positions, &per_draft_, &have_draft_);
}

double StepCostModel::draft_ratio() const {
  if (!have_t1_ || !have_draft_ || t1_ <= 0) return 0;
  return std::clamp(per_draft_ / t1_, 0.0, 4.0);
}

int32_t ChooseDraftLength(double alpha, double r, int32_t k_max) {
  alpha = std::clamp(alpha, 0.0, 0.999);
  int32_t best = 0;
  double best_rate = 1.0, expected = 1.0, power = 1.0;
  for (int32_t k = 1; k <= k_max; ++k) {
    power *= alpha;
    expected += power;
    const double rate = expected / (1.0 + r * k);
    if (rate > best_rate * (1.0 + 1e-9)) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

int32_t ProbeSchedule::Next(int32_t n) {
  probing_ = false;
  if (n > 0) {
    since_ = 0;
    interval_ = kSpecProbeInterval;
    return n;
  }
  if (++since_ < interval_) return 0;
  since_ = 0;
  interval_ = std::min(2 * interval_, kSpecProbeMaxInterval);
  probing_ = true;
  return 1;
}

}  // namespace infera
