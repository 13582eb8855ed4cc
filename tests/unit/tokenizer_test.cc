#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"
#include "formats/gguf_reader.h"
#include "tokenizer/loader.h"
#include "tokenizer/utf8.h"
#include "unit/test_util.h"

namespace infera::tokenizer_test {
namespace {

TEST(Utf8, IncompleteTailAndSanitize) {
  EXPECT_EQ(Utf8IncompleteTail("abc"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("a\xE2\x96"), 2u);
  EXPECT_EQ(Utf8IncompleteTail("a\xE2\x96\x81"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(Utf8Sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // surrogate
}

TEST(SpmTokenizer, Stories260KFromGgufAndLlama2c) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  const std::string dir = testing::SharedDir() + "/models/stories260K";
  auto g = GgufFile::Open(dir + "/stories260K.gguf");
  ASSERT_TRUE(g.ok());
  auto from_gguf = TokenizerFromGguf(**g);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().ToString();
  auto from_bin = TokenizerFromLlama2c(dir + "/tok512.bin", 512);
  ASSERT_TRUE(from_bin.ok()) << from_bin.status().ToString();
  for (const auto* tok : {from_gguf->get(), from_bin->get()}) {
    EXPECT_EQ(tok->Encode("Zoo", true, false), (std::vector<int32_t>{1, 410, 469, 347}));
    EXPECT_EQ(tok->Encode("", true, false), (std::vector<int32_t>{1}));
    EXPECT_EQ(tok->Decode(tok->Encode("Once upon a time, there was", true, false)), "Once upon a time, there was");
  }
}

TEST(SpmTokenizer, Llama2VectorsWithTokenizerBin) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  const std::string dir = testing::SharedDir() + "/data/tokenizers/llama2";
  auto tok = TokenizerFromLlama2c(dir + "/tokenizer.bin", 32000);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto text = ReadFileToString(dir + "/llama2c_test_vectors.json");
  ASSERT_TRUE(text.ok());
  auto j = ParseJson(*text);
  ASSERT_FALSE(j.is_discarded());
  int n = 0;
  for (const auto& c : j["cases"]) {
    const std::string s = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->Encode(s, true, false), ids) << s;
    EXPECT_EQ((*tok)->Decode(ids), s);
    ++n;
  }
  EXPECT_EQ(n, 5);
}

TEST(StreamDecoder, NeverEmitsInvalidUtf8) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto tok = TokenizerFromLlama2c(testing::SharedDir() + "/data/tokenizers/llama2/tokenizer.bin", 32000);
  ASSERT_TRUE(tok.ok());
  std::mt19937 rng(5);
  // Mostly byte tokens (3..258) so multi-byte characters get split.
  std::uniform_int_distribution<int32_t> byte_tok(3, 258), any_tok(0, 31999), coin(0, 3);
  for (int seq = 0; seq < 500; ++seq) {
    StreamDecoder dec(**tok, true);
    std::string all;
    for (int i = 0; i < 40; ++i) {
      const int32_t id = coin(rng) ? byte_tok(rng) : any_tok(rng);
      std::string chunk = dec.Push(id);
      ASSERT_TRUE(IsValidUtf8(chunk)) << "seq " << seq;
      all += chunk;
    }
    std::string tail = dec.Flush();
    ASSERT_TRUE(IsValidUtf8(tail));
  }
  // A character split over byte tokens comes out whole, once.
  StreamDecoder dec(**tok, false);
  const std::string euro = "\xE2\x82\xAC";
  std::string out;
  for (unsigned char c : euro) {
    std::string chunk = dec.Push(3 + c);
    if (out.empty() && chunk.empty()) continue;
    out += chunk;
  }
  EXPECT_EQ(out, euro);
}

}  // namespace
}  // namespace infera::tokenizer_test
