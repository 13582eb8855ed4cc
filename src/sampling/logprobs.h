// Token log-probabilities from a row of logits (OpenAI's logprobs and
// top_logprobs, vLLM's prompt_logprobs). Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "infera/engine.h"

namespace infera {

// Log-softmax of logits [n] at `token` (with its rank: 1 + how many tokens
// are more likely), and the k most likely tokens (ties: lower id first).
TokenLogprob LogprobsOf(const float* logits, int32_t n, int32_t token, int32_t k);

}  // namespace infera
