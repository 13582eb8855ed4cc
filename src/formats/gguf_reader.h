// GGUF (v2, v3) reader. Every field of the file is untrusted: counts, string
// lengths, offsets, dims and types are validated before use, and every error
// is a Status naming the file and the problem. Tensor data is not copied: the
// views point into the memory map owned by GgufFile.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/mmap_file.h"
#include "formats/tensor_view.h"
#include "infera/status.h"

namespace infera {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* GgufTypeName(GgufType t);

// A metadata value. Scalars use the field matching their type class; arrays
// keep their element type and the elements in the matching vector.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;      // unsigned integers and bool
  int64_t i = 0;       // signed integers
  double f = 0;        // floats
  std::string s;       // string
  // Arrays:
  GgufType elem_type = GgufType::kUint8;
  std::vector<uint64_t> arr_u;
  std::vector<int64_t> arr_i;
  std::vector<double> arr_f;
  std::vector<std::string> arr_s;
  std::vector<GgufValue> arr_a;  // nested arrays
  uint64_t ArraySize() const;

  bool IsInteger() const;
  std::optional<int64_t> AsInt() const;    // any integer type (or bool)
  std::optional<double> AsFloat() const;   // any numeric type
  std::string DebugString(size_t max_items = 8) const;
};

class GgufFile {
 public:
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (which must outlive the result); used by
  // the fuzzer. `name` is used in error messages.
  static StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size,
                                                   const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  uint64_t file_size() const { return size_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  // Tensors in file order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* FindTensor(const std::string& name) const;
  // MappedFile::Release for bytes of this file (nothing for caller-owned bytes).
  void ReleasePages(const uint8_t* p, size_t n) const {
    if (map_) map_->Release(p, n);
  }

  const GgufValue* Find(const std::string& key) const;
  std::optional<std::string> GetString(const std::string& key) const;
  std::optional<int64_t> GetInt(const std::string& key) const;
  std::optional<double> GetFloat(const std::string& key) const;
  std::optional<bool> GetBool(const std::string& key) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> map_;  // null when parsing caller-owned bytes
  std::string name_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace infera
