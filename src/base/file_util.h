#pragma once

#include <cstdint>
#include <string>

#include "infera/status.h"

namespace infera {

StatusOr<std::string> ReadFileToString(const std::string& path);
// Atomically: a temporary file beside `path`, renamed over it at the end.
Status WriteStringToFile(const std::string& path, const std::string& data);
bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);
StatusOr<uint64_t> FileSize(const std::string& path);
// MemAvailable from /proc/meminfo (8 GiB when it cannot be read).
uint64_t AvailableMemoryBytes();

}  // namespace infera
