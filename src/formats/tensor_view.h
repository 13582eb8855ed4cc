// A named tensor inside a model file: type, shape and a pointer to its bytes
// (inside a memory map or a buffer owned by whoever produced the view).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace infera {

struct TensorView {
  std::string name;
  DType type = DType::kF32;
  // GGUF order: ne[0] is the innermost (contiguous) dimension. A weight
  // matrix W [n_out, n_in] has ne = {n_in, n_out}.
  std::vector<int64_t> ne;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t NumElements() const {
    int64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
  }
  std::string ShapeString() const;
};

}  // namespace infera
