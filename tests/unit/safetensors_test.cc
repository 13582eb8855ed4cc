#include <cstring>

#include <gtest/gtest.h>

#include "formats/safetensors.h"

namespace infera::safetensors_test {
namespace {

std::string Make(const std::string& header, size_t data_bytes) {
  std::string b;
  uint64_t n = header.size();
  b.append(reinterpret_cast<const char*>(&n), 8);
  b += header;
  b.append(data_bytes, '\0');
  return b;
}

StatusOr<std::unique_ptr<SafetensorsSet>> P(const std::string& b) {
  return SafetensorsSet::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "m.safetensors");
}

TEST(Safetensors, ParsesAndReversesShape) {
  auto s = P(Make(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[3,4],"data_offsets":[0,24]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})", 32));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const TensorView* w = (*s)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ne, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(w->type, DType::kF16);
}

void ExpectError(const std::string& b, const std::string& needle) {
  auto s = P(b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
}

TEST(Safetensors, RejectsBadFiles) {
  ExpectError("abc", "shorter");
  ExpectError(Make("{", 0), "not a JSON object");
  ExpectError(Make("[]", 0), "not a JSON object");
  std::string huge(8, '\xff');
  ExpectError(huge + "{}", "header length");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "outside the data");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16), "needs 16");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16), "overlap");
  ExpectError(Make(R"({"w":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", 16), "unsupported dtype");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":"x","data_offsets":[0,8]}})", 8), "no shape");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8), "bad dim");
  ExpectError(Make(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "outside");
  ExpectError(Make(R"({"w":5})", 0), "not an object");
}

TEST(Safetensors, MissingDirIsNotFound) {
  auto s = SafetensorsSet::OpenDir("/nonexistent");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace infera::safetensors_test
