// Locating the bundled default model from any working directory.
#pragma once

#include <string>
#include <vector>

#include "infera/status.h"

namespace infera {

// Candidate files, in search order: the source tree's models/default.gguf
// (the trained demo model), the build tree's generated model, the install
// prefix's share/infera/models, and <exe>/../share/infera/models.
std::vector<std::string> DefaultModelCandidates();
StatusOr<std::string> FindDefaultModel();

}  // namespace infera
