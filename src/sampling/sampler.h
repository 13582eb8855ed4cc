// Token sampler: penalties -> top-k -> top-p -> min-p -> temperature ->
// draw (llama.cpp's default chain), or argmax when temperature == 0.
// Owns its RNG (seedable, reproducible across runs on any platform).
// Not thread-safe; one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "infera/sampling_params.h"
#include "infera/status.h"

namespace infera {

Status ValidateSamplingParams(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);

  // logits [n_vocab] (modified in place by penalties); history = all tokens
  // of the sequence so far (prompt + generated).
  int32_t Sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);

  // The distribution the last Sample drew from (llama.cpp's post-sampling
  // probabilities, vLLM's processed log-probabilities), for its `token`:
  // *logprob = log p(token) and `top` the k most probable tokens of it
  // (token, log p), most probable first, those of probability 0 left out.
  // Greedy (temperature 0): the argmax with probability 1. `token` must be
  // the one Sample returned. *rank: 1 + how many of the distribution's tokens
  // are more probable.
  void LastDistribution(int32_t token, int32_t k, float* logprob, std::vector<std::pair<int32_t, float>>* top,
                        int32_t* rank) const;

 private:
  void ApplyPenalties(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);
  double Uniform();  // [0, 1)

  SamplingParams p_;
  std::mt19937_64 rng_;
  struct Cand { int32_t id; float logit; float p; };
  std::vector<Cand> cands_;
  size_t last_n_ = 0;  // the last draw's candidates: cands_[0, last_n_) (0: greedy)
};

}  // namespace infera
