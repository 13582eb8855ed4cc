#include "base/file_util.h"

#include "base/output_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace infera {

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return InvalidArgument(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteStringToFile(const std::string& path, const std::string& data) {
  return WriteFileAtomically(path, data);
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

StatusOr<uint64_t> FileSize(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  if (ec) return NotFound(path + ": " + ec.message());
  return static_cast<uint64_t>(n);
}

uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 8ull << 30;
}

}  // namespace infera
