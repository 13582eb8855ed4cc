// Flags users bring from llama.cpp and vLLM command lines. Before CLI11
// parses, the argument list is rewritten: llama.cpp's multi-letter short
// flags become infera's names (-np -> --parallel, -cnv -> -i, -sys ->
// --system), flags for things infera does anyway or cannot do on a CPU are
// dropped with a note saying what infera does instead (-ngl, -fa, --mlock),
// and flags that cannot be honoured are refused with such a note (-hf).
// -ctk / -ctv become one --kv-cache-type (f32, bf16, q8_0; K and V alike);
// llama.cpp's samplers infera lacks (mirostat, typical, DRY, XTC,
// top-n-sigma, dynamic temperature) are accepted when switched off and
// refused otherwise.
// Without this CLI11 would read `-ngl 99` as `-n gl` and fail obscurely.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace infera::cli {

struct TranslatedArgs {
  std::vector<std::string> args;   // argv[1..] rewritten
  std::vector<std::string> notes;  // one line each, for stderr
  std::string error;               // non-empty: refuse with this message
};

// args: argv[1..argc). Arguments after a literal "--" are left alone, and
// so is a flag for which `is_own` is true (the command being run has an
// option of that name: bench-serve's --timeout, quantize's --keep).
TranslatedArgs TranslateForeignFlags(const std::vector<std::string>& args,
                                     const std::function<bool(const std::string&)>& is_own = {});

}  // namespace infera::cli
