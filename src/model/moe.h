// Routing of tokens to the experts of a sparse MoE layer.
#pragma once

#include <cstdint>

namespace infera {

// logits [n_expert] (the router's output for one token) -> the k experts to
// run, most probable first, and their weights: softmax over all experts,
// the top k kept, divided by their sum when `renormalize` (mixtral,
// qwen3moe; qwen2moe keeps the raw probabilities). Ties go to the lower
// expert index, so the choice never depends on anything but the logits.
// experts [k], weights [k].
void RouteToken(const float* logits, int n_expert, int k, bool renormalize, int32_t* experts, float* weights);

}  // namespace infera
