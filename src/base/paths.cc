#include "base/paths.h"

#include <unistd.h>

#include <filesystem>

#include "build_paths.h"

namespace infera {

std::vector<std::string> DefaultModelCandidates() {
  std::vector<std::string> c = {
      std::string(INFERA_SOURCE_MODELS_DIR) + "/default.gguf",
      std::string(INFERA_BUILD_MODELS_DIR) + "/default.gguf",
      std::string(INFERA_INSTALL_MODELS_DIR) + "/default.gguf",
  };
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    auto dir = std::filesystem::path(buf).parent_path();
    c.push_back((dir / "../share/infera/models/default.gguf").lexically_normal().string());
    c.push_back((dir / "models/default.gguf").string());
  }
  return c;
}

StatusOr<std::string> FindDefaultModel() {
  std::error_code ec;
  for (const auto& p : DefaultModelCandidates()) {
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return NotFound("no bundled default model found (looked in " +
                  std::string(INFERA_SOURCE_MODELS_DIR) + " and " + INFERA_BUILD_MODELS_DIR +
                  "); pass --model PATH");
}

}  // namespace infera
