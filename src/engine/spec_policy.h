// How many tokens to draft for speculative decoding (pure logic; not
// thread-safe, owned by the engine loop).
//
// Model: each drafted token is accepted with probability alpha (estimated per
// sequence from its recent verifications), so a draft of k tokens yields
// E(k) = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha) tokens
// per step; and a step of 1 + k tokens costs (1 + r·k) plain decode steps,
// r being the marginal cost of one more token in the step (measured from the
// engine's own step times: decode is memory-bound, so r << 1 on large models,
// and near 1 where the weights sit in cache). A draft model adds its own
// cost, d per drafted position (its forward passes, measured the same way;
// 0 for n-gram drafts). The draft length maximizes E(k) / (1 + (r + d)·k);
// 0 means drafting does not pay.
#pragma once

#include <cstdint>

namespace infera {

// Per-sequence acceptance rate: a Beta(1, 1) prior over recent outcomes,
// forgetting old ones, so a sequence that stopped drafting tries again after
// a while (its estimate drifts back towards 1/2).
class AcceptanceEstimate {
 public:
  // A verification: `drafted` tokens checked, `accepted` of them (a prefix)
  // taken. The first rejection (if any) is one failure.
  void Verified(int32_t drafted, int32_t accepted);
  // One step that did not verify a draft.
  void Forget();
  double alpha() const { return (hits_ + 1.0) / (trials_ + 2.0); }

 private:
  static constexpr double kDecay = 0.9;
  double hits_ = 0, trials_ = 0;
};

// The marginal cost of a step's extra tokens, relative to a one-token step,
// from the wall times of single-sequence decode steps (exponential averages).
class StepCostModel {
 public:
  void Observe(int32_t tokens, double seconds);
  // r; a prior of 0.25 until both kinds of step were seen.
  double marginal_ratio() const;
  // A draft model's proposal for one sequence of up to `positions` tokens
  // took `seconds` (catching up on the sequence's new tokens included).
  void ObserveDraft(int32_t positions, double seconds);
  // d: the draft model's cost per drafted position relative to a one-token
  // step; 0 until a proposal and a one-token step were seen.
  double draft_ratio() const;
  // What one more drafted position costs, relative to a one-token step:
  // r + d (ChooseDraftLength's r; d is 0 without a draft model).
  double position_cost() const { return marginal_ratio() + draft_ratio(); }

 private:
  static constexpr double kWeight = 0.1;
  static constexpr double kPriorRatio = 0.25;
  double t1_ = 0, per_token_ = 0, per_draft_ = 0;
  bool have_t1_ = false, have_per_token_ = false, have_draft_ = false;
};

// argmax over k in [0, k_max] of E(k) / (1 + r·k).
int32_t ChooseDraftLength(double alpha, double r, int32_t k_max);

// A sequence that found drafts but drafted none for this many steps drafts
// one token anyway (a probe), so that its acceptance and the step cost stay
// measured. Each probe after which drafting still does not pay doubles the
// interval, up to kSpecProbeMaxInterval: a pair that never pays costs one
// probe per 512 tokens instead of one per 32.
inline constexpr int32_t kSpecProbeInterval = 32;
inline constexpr int32_t kSpecProbeMaxInterval = 512;
// A draft model that is further behind a sequence than this at a probe
// starts again on its last kSpecProbeCatchUp tokens instead of catching up
// on all it missed (whose cost would grow with the interval).
inline constexpr int32_t kSpecProbeCatchUp = 64;

// When a sequence probes (per sequence; not thread-safe).
class ProbeSchedule {
 public:
  // The policy chose `n` tokens to draft this step: n when n > 0 (drafting
  // pays: the interval starts again at kSpecProbeInterval), else 1 when a
  // probe is due, else 0.
  int32_t Next(int32_t n);
  // Whether the last Next() returned a probe.
  bool probing() const { return probing_; }

 private:
  int32_t interval_ = kSpecProbeInterval;
  int32_t since_ = 0;
  bool probing_ = false;
};

}  // namespace infera
