// Read-only memory map of a whole file. Owns the mapping; movable, not
// copyable. The bytes stay valid for the object's lifetime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "infera/status.h"

namespace infera {

class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages wholly inside [p, p + n) (a range of this
  // mapping; anything outside is ignored): they stop counting towards the
  // process's memory and are read from the file again if touched. For bytes
  // that were copied elsewhere (repacked weights).
  void Release(const uint8_t* p, size_t n) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace infera
