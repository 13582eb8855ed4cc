// The Python API's result types (vLLM's RequestOutput, CompletionOutput and
// Logprob) and how engine outputs accumulate into them. Plain data; built
// with the GIL released, converted to Python objects by pybind11 afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "infera/engine.h"
#include "tokenizer/tokenizer.h"

namespace infera::python {

// vLLM's Logprob: a token's log-probability, its rank in the distribution
// (1 + how many tokens are more likely) and its text.
struct PyLogprob {
  float logprob = 0;
  int rank = 1;
  std::string decoded_token;
};
// {token id: Logprob} of one position: its token and the k most likely.
using PyLogprobs = std::map<int32_t, PyLogprob>;

struct PyCompletionOutput {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::optional<std::string> finish_reason;
  // vLLM's: the stop string (or stop_token_ids entry) that ended the output, else None.
  std::optional<std::variant<std::string, int32_t>> stop_reason;
  // With logprobs: per generated token, {token id: Logprob} of the sampled
  // token and the top candidates (vLLM's shape, ids as keys).
  std::optional<std::vector<PyLogprobs>> logprobs;
  std::optional<double> cumulative_logprob;
};

struct PyRequestOutput {
  std::string request_id;
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_token_ids;
  // With prompt_logprobs: None for the first prompt token, then {token id:
  // Logprob} of each prompt token and the k most likely there.
  std::optional<std::vector<std::optional<PyLogprobs>>> prompt_logprobs;
  std::vector<PyCompletionOutput> outputs;
  bool finished = false;
  int num_cached_tokens = 0;
};

// One position's entries: `lp.token` and the first `k` of lp.top (all when
// k < 0), ranked; tokens' text from `tok`.
inline PyLogprobs ToPyLogprobs(const TokenLogprob& lp, int k, const Tokenizer& tok) {
  PyLogprobs m;
  const size_t n = k < 0 ? lp.top.size() : std::min(lp.top.size(), static_cast<size_t>(k));
  for (size_t i = 0; i < n; ++i)
    m[lp.top[i].first] = {lp.top[i].second, lp.TopRank(i), tok.TokenToPiece(lp.top[i].first, true)};
  m[lp.token] = {lp.logprob, lp.rank, tok.TokenToPiece(lp.token, true)};
  return m;
}

// Accumulates one step's output `o` of choice `c` of request `r`: text,
// tokens, log-probabilities (want_logprobs) and, from the first choice
// (the others compute the same prompt), the prompt's (prompt_logprobs k >= 0).
inline void AppendOutput(const RequestOutput& o, const Tokenizer& tok, bool want_logprobs, int prompt_logprobs,
                         PyRequestOutput* r, PyCompletionOutput* c) {
  c->text += o.text;
  c->token_ids.insert(c->token_ids.end(), o.tokens.begin(), o.tokens.end());
  if (want_logprobs) {
    if (!c->logprobs) c->logprobs.emplace();
    if (!c->cumulative_logprob) c->cumulative_logprob = 0.0;
    for (const TokenLogprob& lp : o.logprobs) {
      c->logprobs->push_back(ToPyLogprobs(lp, -1, tok));
      *c->cumulative_logprob += lp.logprob;
    }
  }
  if (prompt_logprobs >= 0 && c->index == 0) {
    if (!r->prompt_logprobs) r->prompt_logprobs.emplace(1);  // [None, ...]
    for (const TokenLogprob& lp : o.prompt_logprobs)
      r->prompt_logprobs->push_back(ToPyLogprobs(lp, prompt_logprobs, tok));
  }
}

}  // namespace infera::python
