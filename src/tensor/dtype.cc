#include "tensor/dtype.h"

#include <array>

#include "base/check.h"
#include "tensor/quant_blocks.h"

namespace infera {
namespace {

constexpr DTypeInfo kTypes[] = {
    {DType::kF32, "f32", 1, 4, false},        {DType::kF16, "f16", 1, 2, false},
    {DType::kQ4_0, "q4_0", 32, 18, true},     {DType::kQ4_1, "q4_1", 32, 20, true},
    {DType::kQ5_0, "q5_0", 32, 22, true},     {DType::kQ5_1, "q5_1", 32, 24, true},
    {DType::kQ8_0, "q8_0", 32, 34, true},     {DType::kQ8_1, "q8_1", 32, 36, true},
    {DType::kQ2_K, "q2_K", 256, 84, true},    {DType::kQ3_K, "q3_K", 256, 110, true},
    {DType::kQ4_K, "q4_K", 256, 144, true},   {DType::kQ5_K, "q5_K", 256, 176, true},
    {DType::kQ6_K, "q6_K", 256, 210, true},   {DType::kQ8_K, "q8_K", 256, 292, true},
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66, true}, {DType::kIQ2_XS, "iq2_xs", 256, 74, true},
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98, true}, {DType::kIQ1_S, "iq1_s", 256, 50, true},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true},  {DType::kIQ3_S, "iq3_s", 256, 110, true},
    {DType::kIQ2_S, "iq2_s", 256, 82, true},   {DType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {DType::kI8, "i8", 1, 1, false},          {DType::kI16, "i16", 1, 2, false},
    {DType::kI32, "i32", 1, 4, false},        {DType::kI64, "i64", 1, 8, false},
    {DType::kF64, "f64", 1, 8, false},        {DType::kIQ1_M, "iq1_m", 256, 56, true},
    {DType::kBF16, "bf16", 1, 2, false},      {DType::kTQ1_0, "tq1_0", 256, 54, true},
    {DType::kTQ2_0, "tq2_0", 256, 66, true},   {DType::kQ8_0S24, "q8_0_s24", 32, 22, true},
    {DType::kW8A8, "w8a8", 32, 34, true},     {DType::kQ8_0S48, "q8_0_s48", 32, 22, true},
    {DType::kQ4_0S24, "q4_0_s24", 32, 14, true},
};

}  // namespace

std::optional<DTypeInfo> GetDTypeInfo(uint32_t raw) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == raw) return t;
  }
  return std::nullopt;
}

const DTypeInfo& GetDTypeInfo(DType t) {
  for (const auto& i : kTypes) {
    if (i.type == t) return i;
  }
  CHECK(false && "unknown dtype");
}

const char* DTypeName(DType t) { return GetDTypeInfo(t).name; }

std::optional<DType> ParseDTypeName(std::string_view name) {
  for (const auto& t : kTypes) {
    std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size(); ++i) {
      char a = n[i], b = name[i];
      if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
      if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
      if (a != b) { eq = false; break; }
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(DType t, int64_t n) {
  const auto& info = GetDTypeInfo(t);
  if (n < 0 || n % info.block_size != 0) return std::nullopt;
  return static_cast<uint64_t>(n / info.block_size) * static_cast<uint64_t>(info.type_size);
}

bool IsSupportedWeightType(DType t) { return CanDequantize(t); }

}  // namespace infera
