// Writes a loaded model as a llama.cpp-style GGUF, choosing the stored type
// of each weight matrix (used by `convert` and `quantize`).
#pragma once

#include <functional>
#include <optional>
#include <map>
#include <string>

#include "formats/gguf_writer.h"
#include "tools/cli_common.h"

namespace infera::cli {

// (GGUF tensor name, matrix) -> the type to store it in.
using TypeChooser = std::function<DType(const std::string& name, const WeightMatrix& m)>;

struct ModelWriteOptions {
  bool embed_tokenizer = true;  // write tokenizer metadata from lm.tokenizer when the source has none
  DType file_type = DType::kF32;  // the file's main type
  std::optional<uint32_t> llama_ftype;  // general.file_type (default: from file_type)
  bool show_progress = false;     // a progress bar on stderr
  // Importance of the input columns of tensor `name` (llama.cpp's imatrix:
  // mean x^2, [n_in], or [n_expert * n_in] for stacked experts) for the
  // importance-weighted quantizers; empty: round-to-nearest. May be unset.
  std::function<std::vector<float>(const std::string& name)> importance;
  // Blocks already encoded in the chosen type (GPTQ): stored as they are
  // when the callback returns them (null: the writer encodes the tensor).
  std::function<const std::vector<uint8_t>*(const std::string& name)> encoded;
  // Adds keys after the model's own (e.g. how it was pruned). May be empty.
  std::function<void(GgufWriter*)> extra_metadata;
  // Adds tensors after the model's own (W8A8 outlier columns). May be empty.
  std::function<void(GgufWriter*)> extra_tensors;
};

struct ModelWriteSummary {
  uint64_t bytes = 0;       // tensor data
  uint64_t elements = 0;    // of all tensors
  std::map<std::string, int> tensors_per_type;
};

StatusOr<ModelWriteSummary> WriteModelGguf(const LoadedModel& lm, const TypeChooser& choose,
                                           const ModelWriteOptions& opts, const std::string& path);

}  // namespace infera::cli
