#include "engine/ngram_draft.h"

#include <algorithm>

namespace infera {

std::vector<int32_t> NgramDraft(const std::vector<int32_t>& tokens, int32_t ngram_min, int32_t ngram_max,
                                int32_t max_draft) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_draft <= 0) return {};
  for (int64_t n = std::max<int32_t>(ngram_max, 1); n >= std::max<int32_t>(ngram_min, 1); --n) {
    if (len <= n) continue;
    const int32_t* suffix = tokens.data() + (len - n);
    // Occurrences starting at p, latest first, followed by at least one token.
    for (int64_t p = len - n - 1; p >= 0; --p) {
      if (tokens[p + n - 1] != suffix[n - 1] || !std::equal(suffix, suffix + n, tokens.data() + p)) continue;
      // The copy continues past the sequence's end into the draft itself (as
      // LZ77's overlapping copies do): a repeating pattern drafts in full.
      std::vector<int32_t> draft(max_draft);
      for (int64_t i = 0; i < max_draft; ++i) {
        const int64_t src = p + n + i;
        draft[i] = src < len ? tokens[src] : draft[src - len];
      }
      return draft;
    }
  }
  return {};
}

}  // namespace infera
