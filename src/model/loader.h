// Opens a model from a GGUF file, a Hugging Face folder (config.json +
// safetensors) or a llama2.c checkpoint, validating everything.
#pragma once

#include <memory>
#include <string>

#include "infera/status.h"
#include "model/model.h"
#include "model/shard.h"

namespace infera {

struct ModelLoadOptions {
  // A split model (--tp / --pp): load only world rank `rank`'s shard.
  ParallelLayout layout;
  int rank = 0;
};

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path, const ModelLoadOptions& opts = {});

}  // namespace infera
