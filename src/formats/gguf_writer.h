// GGUF v3 writer following llama.cpp's conventions: metadata in insertion
// order, tensor data aligned to general.alignment (32 unless set).
// Not thread-safe; tensor bytes are referenced, not copied, until Write().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf_reader.h"
#include "infera/status.h"
#include "tensor/dtype.h"

namespace infera {

class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& v);
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetF32Array(const std::string& key, const std::vector<float>& v);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& v);
  // Copies a value read from another GGUF file (any type, nested arrays too).
  void SetValue(const std::string& key, const GgufValue& v);

  // `data` must stay valid until Write(); ne in GGUF order (ne[0] innermost).
  void AddTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                 const void* data, uint64_t nbytes);
  // Same, but the writer keeps its own copy of the bytes.
  void AddTensorCopy(const std::string& name, DType type, const std::vector<int64_t>& ne,
                     std::vector<uint8_t> bytes);

  Status Write(const std::string& path) const;

 private:
  struct Kv { std::string key; std::string encoded; };
  struct Tensor {
    std::string name; DType type; std::vector<int64_t> ne; const void* data; uint64_t nbytes;
    size_t owned_index;  // SIZE_MAX when not owned
  };
  void SetEncoded(const std::string& key, std::string encoded);
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
  std::vector<std::vector<uint8_t>> owned_;
  uint64_t alignment_ = 32;
};

}  // namespace infera
