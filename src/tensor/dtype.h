// Element types, numbered exactly as GGUF's ggml_type so file values map 1:1.
// Quantized types are stored as blocks of `block_size` elements occupying
// `type_size` bytes; a row of n elements takes n / block_size * type_size bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infera {

enum class DType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21,
  kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35,
  // infera's own (docs/pruning.md; other GGUF readers do not know it): Q8_0
  // with 2:4 structured sparsity, only the kept half of each block stored.
  kQ8_0S24 = 200,
  // infera's own (docs/quantization.md): W8A8, Q8_0's blocks with one scale
  // per row (every block of a row holds the same d), run as whole-row int8
  // weights against per-token int8 activations (SmoothQuant's scheme).
  kW8A8 = 201,
  // infera's own (docs/pruning.md): Q8_0 with 4:8 structured sparsity, the
  // kept half of each block stored with a position mask per 8 elements.
  kQ8_0S48 = 202,
  // infera's own (docs/pruning.md): Q4_0 with 2:4 structured sparsity, the
  // kept half of each block stored (4-bit values, 3.5 bits per weight).
  kQ4_0S24 = 203,
};

struct DTypeInfo {
  DType type;
  const char* name;     // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_size;   // elements per block (1 for plain types)
  int64_t type_size;    // bytes per block
  bool quantized;
};

// nullopt for a value no known type has (untrusted input).
std::optional<DTypeInfo> GetDTypeInfo(uint32_t raw);
const DTypeInfo& GetDTypeInfo(DType t);
const char* DTypeName(DType t);
std::optional<DType> ParseDTypeName(std::string_view name);

// Bytes of a row of n elements; nullopt if n is not a multiple of the block.
std::optional<uint64_t> RowBytes(DType t, int64_t n);

// Whether this build has matmul kernels for weights of this type.
bool IsSupportedWeightType(DType t);

}  // namespace infera
