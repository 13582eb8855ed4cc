// Token sampler: penalties -> top-k -> top-p -> min-p -> temperature ->
// draw (llama.cpp's default chain), or argmax when temperature == 0.
// Owns its RNG (seedable, reproducible across runs on any platform).
// Not thread-safe; one per sequence.
#pragma once

#include <cstdint>
#include <random>
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

 private:
  void ApplyPenalties(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);
  double Uniform();  // [0, 1)

  SamplingParams p_;
  std::mt19937_64 rng_;
  struct Cand { int32_t id; float logit; float p; };
  std::vector<Cand> cands_;
};

}  // namespace infera
