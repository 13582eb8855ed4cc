#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace infera {

void RouteToken(const float* logits, int n_expert, int k, bool renormalize, int32_t* experts, float* weights) {
  // Softmax preserves order: choose on the logits (exp could round two
  // different logits to one probability).
  std::vector<int32_t> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float mx = logits[order[0]];
  double total = 0;
  for (int e = 0; e < n_expert; ++e) total += std::exp(static_cast<double>(logits[e]) - mx);
  std::vector<double> p(k);
  double chosen = 0;
  for (int i = 0; i < k; ++i) {
    experts[i] = order[i];
    p[i] = std::exp(static_cast<double>(logits[order[i]]) - mx) / total;
    chosen += p[i];
  }
  for (int i = 0; i < k; ++i) weights[i] = static_cast<float>(renormalize ? p[i] / chosen : p[i]);
}

}  // namespace infera
