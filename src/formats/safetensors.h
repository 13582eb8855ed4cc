// safetensors reader: one file or a sharded set (model.safetensors.index.json).
// Header JSON and every offset are validated; tensor data stays memory-mapped.
// Views use GGUF dim order (ne[0] innermost), i.e. the file's shape reversed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/mmap_file.h"
#include "formats/tensor_view.h"
#include "infera/status.h"

namespace infera {

class SafetensorsSet {
 public:
  // Opens `dir`/model.safetensors or the shards named by
  // `dir`/model.safetensors.index.json.
  static StatusOr<std::unique_ptr<SafetensorsSet>> OpenDir(const std::string& dir);
  static StatusOr<std::unique_ptr<SafetensorsSet>> OpenFile(const std::string& path);
  // Parses caller-owned bytes (fuzzing); they must outlive the result.
  static StatusOr<std::unique_ptr<SafetensorsSet>> Parse(const uint8_t* data, size_t size,
                                                         const std::string& name);

  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  Status AddFile(const uint8_t* data, size_t size, const std::string& name);
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::map<std::string, TensorView> tensors_;
  uint64_t total_bytes_ = 0;
};

}  // namespace infera
