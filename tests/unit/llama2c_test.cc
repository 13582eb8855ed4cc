#include <climits>
#include <cstring>

#include <gtest/gtest.h>

#include "formats/llama2c.h"
#include "unit/test_util.h"

namespace infera::llama2c_test {
namespace {

StatusOr<std::unique_ptr<Llama2cCheckpoint>> P(const std::string& b) {
  return Llama2cCheckpoint::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "m.bin");
}

std::string Header(std::vector<int32_t> h) { return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 4); }

TEST(Llama2c, RejectsBadHeaders) {
  EXPECT_FALSE(P("abc").ok());
  EXPECT_NE(P(Header({0, 8, 1, 1, 1, 16, 8})).status().message().find("dim"), std::string::npos);
  EXPECT_NE(P(Header({8, 8, 1, 3, 1, 16, 8})).status().message().find("n_heads"), std::string::npos);
  EXPECT_NE(P(Header({8, 8, 1, 2, 1, 16, 8})).status().message().find("implies"), std::string::npos);
  // Found by the fuzzer: INT32_MIN vocab size (negation overflow).
  EXPECT_NE(P(Header({8, 8, 1, 2, 1, INT32_MIN, 8})).status().message().find("vocab_size"), std::string::npos);
}

TEST(Llama2c, ParsesSizedFile) {
  // dim 8, hidden 8, 1 layer, 2 heads, 1 kv head, vocab 4, seq 2.
  const int64_t dim = 8, hd = 8, V = 4, kv = 4, head = 4, seq = 2;
  const int64_t floats = V * dim + dim + dim * dim + 2 * dim * kv + dim * dim + dim + 3 * dim * hd + dim + seq * head / 2 * 2;
  std::string b = Header({8, 8, 1, 2, 1, 4, 2}) + std::string(floats * 4, '\0');
  auto ck = P(b);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE((*ck)->header().shared_classifier);
  EXPECT_FALSE(P(b.substr(0, b.size() - 4)).ok());
}

TEST(Llama2c, ReadsRealCheckpointAndTokenizer) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto ck = Llama2cCheckpoint::Open(testing::SharedDir() + "/models/stories260K/stories260K.bin");
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->header().dim, 64);
  EXPECT_EQ((*ck)->header().n_kv_heads, 4);
  auto tok = ReadLlama2cTokenizer(testing::SharedDir() + "/models/stories260K/tok512.bin", 512);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->pieces.size(), 512u);
}

TEST(Llama2c, TokenizerRejectsTruncation) {
  std::string b = Header({4}) + std::string("\0\0\0\0\x05\0\0\0ab", 10);
  auto v = ParseLlama2cTokenizer(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.bin", 1);
  EXPECT_FALSE(v.ok());
}

}  // namespace
}  // namespace infera::llama2c_test
