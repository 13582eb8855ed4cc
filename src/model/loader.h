// Opens a model from a GGUF file, a Hugging Face folder (config.json +
// safetensors) or a llama2.c checkpoint, validating everything.
#pragma once

#include <memory>
#include <string>

#include "infera/status.h"
#include "model/model.h"

namespace infera {

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path);

}  // namespace infera
