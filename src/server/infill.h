// llama-server's POST /infill: a code model's fill-in-the-middle prompt from
// the text before and after the cursor (and other files as context), built
// as llama-server builds it. No I/O, no engine.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "infera/status.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace infera::server {

struct InfillRequest {
  std::string prefix;                                      // input_prefix: the text before the cursor
  std::string suffix;                                      // input_suffix: the text after it
  std::string prompt;                                      // prompt: text the middle starts with (after the prefix)
  std::vector<std::pair<std::string, std::string>> extra;  // input_extra: (filename, text) of other files
};

// Reads input_prefix, input_suffix, input_extra and prompt from `body` and
// removes them, leaving a /completion request's other fields. On a bad
// value returns false with *err (400 naming the field).
bool TakeInfillFields(nlohmann::json* body, InfillRequest* out, ApiError* err);

// The prompt's tokens, as llama-server (format_infill) lays them out with
// the repository-level pattern:
//   [FIM_REP]myproject\n [FIM_SEP]filename\n text ... [FIM_SEP]filename\n
//   [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
// (without FIM_REP / FIM_SEP, extra files are separated by a
// "\n\n--- snippet ---\n\n" line; BOS only where the vocabulary adds one,
// first rather than after the extra files as llama-server puts it). The
// prefix keeps its last 3/4 · n_batch tokens, the suffix its first
// n_batch / 4 - 2 - |prompt|, the extra files the last
// n_ctx - n_batch - 2 · n_predict. spm_order: [FIM_SUF] suffix [FIM_PRE]
// prefix prompt [FIM_MID] instead (llama-server's --spm-infill).
// Unimplemented when the vocabulary has no FIM prefix, suffix or middle token.
StatusOr<std::vector<int32_t>> BuildInfillPrompt(const Tokenizer& tok, const InfillRequest& in, int32_t n_batch,
                                                 int32_t n_ctx, int32_t n_predict, bool spm_order = false);

}  // namespace infera::server
