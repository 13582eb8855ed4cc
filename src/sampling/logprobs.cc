#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace infera {

TokenLogprob LogprobsOf(const float* logits, int32_t n, int32_t token, int32_t k) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<float>(logits[token] - log_z);
  for (int32_t i = 0; i < n; ++i) lp.rank += logits[i] > logits[token] ? 1 : 0;
  if (k > 0) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    k = std::min<int32_t>(k, static_cast<int32_t>(ids.size()));
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int32_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_z));
  }
  return lp;
}

}  // namespace infera
