// Prompt-lookup drafting for speculative decoding (no draft model): when the
// sequence's last n tokens occurred before, the tokens that followed their
// latest earlier occurrence are a good guess of what comes next (code edits,
// quoting, summaries, extraction: outputs that copy their input).
//
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace infera {

// The max_draft tokens that followed the latest earlier occurrence of the last
// n tokens of `tokens`, trying n = ngram_max down to ngram_min, the copy
// running on into the draft where it reaches the end (a repeating pattern
// repeats); empty when none occurs. O(len · ngram_max).
std::vector<int32_t> NgramDraft(const std::vector<int32_t>& tokens, int32_t ngram_min, int32_t ngram_max,
                                int32_t max_draft);

}  // namespace infera
