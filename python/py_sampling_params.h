// The Python API's SamplingParams and GuidedDecodingParams (vLLM's) as plain
// data, and their translation into the engine's RequestParams. Used with
// the GIL held (they raise Python exceptions).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "infera/engine.h"
#include "sampling/sampler.h"

namespace infera::python {

namespace py = pybind11;

// Status -> Python exception: bad arguments are ValueError, the rest
// RuntimeError.
[[noreturn]] inline void Raise(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ||
      st.code() == StatusCode::kNotFound) {
    throw py::value_error(st.message());
  }
  throw std::runtime_error(st.message());
}

// vLLM's GuidedDecodingParams: one output constraint, parsed (and checked)
// when made; the grammar is shared by every request that uses it.
struct PyGuidedDecodingParams {
  std::string description;
  std::shared_ptr<const Grammar> grammar;
};

// vLLM's SamplingParams, with its defaults (temperature 1, top_p 1, top_k
// off, max_tokens 16).
struct PySamplingParams {
  int n = 1;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = -1;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  std::optional<int> max_tokens = 16;
  int min_tokens = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::optional<int> logprobs;
  std::optional<int> prompt_logprobs;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool detokenize = true;  // false: token ids only (text "")
  std::optional<PyGuidedDecodingParams> guided_decoding;

  // Engine parameters; ValueError on values out of range.
  RequestParams ToRequest() const {
    if (n < 1) throw py::value_error("n must be at least 1");
    if (max_tokens && *max_tokens < 1)
      throw py::value_error("max_tokens must be at least 1 (None: to the context end)");
    if (min_tokens < 0) throw py::value_error("min_tokens must be >= 0");
    if (logprobs && (*logprobs < 0 || *logprobs > 20)) throw py::value_error("logprobs must be in [0, 20]");
    if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20)) {
      throw py::value_error("prompt_logprobs must be in [0, 20]");
    }
    RequestParams p;
    p.sampling.temperature = temperature;
    p.sampling.top_p = top_p;
    p.sampling.top_k = top_k;
    p.sampling.min_p = min_p;
    p.sampling.presence_penalty = presence_penalty;
    p.sampling.frequency_penalty = frequency_penalty;
    p.sampling.repetition_penalty = repetition_penalty;
    if (seed) {
      p.sampling.seed = *seed;
      p.sampling.has_seed = true;
    }
    p.max_tokens = max_tokens ? *max_tokens : -1;
    p.min_tokens = min_tokens;
    p.stop = stop;
    p.ignore_eos = ignore_eos;
    p.stop_token_ids = stop_token_ids;
    p.include_stop_str_in_output = include_stop_str_in_output;
    p.skip_special_tokens = skip_special_tokens;
    p.detokenize = detokenize;
    if (!detokenize && !stop.empty()) throw py::value_error("stop strings need detokenize=True");
    p.logprobs = logprobs ? *logprobs : -1;
    p.prompt_logprobs = prompt_logprobs ? *prompt_logprobs : -1;
    if (guided_decoding) p.grammar = guided_decoding->grammar;
    if (Status st = ValidateSamplingParams(p.sampling); !st.ok()) Raise(st);
    return p;
  }
};

}  // namespace infera::python
