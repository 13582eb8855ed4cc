// Helpers shared by the unit tests: temp files, the shared data folder and
// small random models.
#pragma once

#include <string>

#include "model/config.h"
#include "tensor/dtype.h"

namespace infera::testing {

// A fresh directory under the system temp dir, removed at process exit.
std::string TempDir();
std::string SharedDir();  // ../shared beside the repository
bool SharedAvailable();
// Writes a random tiny GGUF (synthetic vocab) and returns its path.
std::string WriteTinyModel(const ModelConfig& c, DType type, uint64_t seed, const std::string& name);
ModelConfig TinyConfig();

}  // namespace infera::testing
