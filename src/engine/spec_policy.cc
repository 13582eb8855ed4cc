#include "engine/spec_policy.h"

#include <algorithm>

namespace infera {

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
  auto avg = [](double* v, bool* have, double x) {
    *v = *have ? *v + kWeight * (x - *v) : x;
    *have = true;
  };
  if (tokens == 1) {
    avg(&t1_, &have_t1_, seconds);
  } else if (have_t1_) {
    // Starts from the prior, so that one slow first step (caches, scratch
    // growing) does not decide alone.
    if (!have_per_token_) per_token_ = kPriorRatio * t1_;
    have_per_token_ = true;
    avg(&per_token_, &have_per_token_, std::max(0.0, seconds - t1_) / (tokens - 1));
  }
}

double StepCostModel::marginal_ratio() const {
  if (!have_t1_ || !have_per_token_ || t1_ <= 0) return kPriorRatio;
  return std::clamp(per_token_ / t1_, 0.01, 4.0);
}

void StepCostModel::ObserveDraft(int32_t positions, double seconds) {
  if (positions < 1 || !(seconds >= 0)) return;
  const double x = seconds / positions;
  per_draft_ = have_draft_ ? per_draft_ + kWeight * (x - per_draft_) : x;
  have_draft_ = true;
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

}  // namespace infera
