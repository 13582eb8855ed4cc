// Fill-in-the-middle: the FIM tokens of real code-model vocabularies
// (llama.cpp's test GGUFs: StarCoder's <fim_prefix>, DeepSeek Coder's
// <｜fim▁begin｜>), /infill's fields, and the prompt llama-server's
// format_infill lays out, with its truncations.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/gguf_reader.h"
#include "server/infill.h"
#include "tokenizer/loader.h"
#include "unit/test_util.h"

namespace infera::server::infill_test {
namespace {

std::unique_ptr<Tokenizer> Vocab(const std::string& name) {
  auto g = GgufFile::Open(testing::SharedDir() + "/data/tokenizers/llamacpp/ggml-vocab-" + name + ".gguf");
  if (!g.ok()) return nullptr;
  auto t = TokenizerFromGguf(**g);
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> Cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Infill, FimTokensOfCodeVocabularies) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto star = Vocab("starcoder");
  ASSERT_NE(star, nullptr);
  const Vocab::Fim& f = star->vocab().fim;
  EXPECT_EQ((std::vector<int32_t>{f.pre, f.suf, f.mid, f.pad, f.rep, f.sep}),
            (std::vector<int32_t>{1, 3, 2, 4, -1, -1}));
  EXPECT_TRUE(star->vocab().IsEog(4));  // <fim_pad> ends generation, as in llama.cpp
  auto ds = Vocab("deepseek-coder");
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ((std::vector<int32_t>{ds->vocab().fim.pre, ds->vocab().fim.suf, ds->vocab().fim.mid}),
            (std::vector<int32_t>{32016, 32015, 32017}));
  auto llama = Vocab("llama-spm");  // no FIM tokens
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->vocab().fim.pre, -1);
  InfillRequest in;
  EXPECT_EQ(BuildInfillPrompt(*llama, in, 512, 1024, 0).status().code(), StatusCode::kUnimplemented);
}

TEST(Infill, PromptAsLlamaServerLaysItOut) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto tok = Vocab("starcoder");
  ASSERT_NE(tok, nullptr);
  auto enc = [&](const std::string& s) { return tok->Encode(s, false, false); };
  InfillRequest in;
  in.prefix = "def add(a, b):\n    ";
  in.suffix = "\n\nprint(add(1, 2))\n";
  in.prompt = "return";
  auto ids = BuildInfillPrompt(*tok, in, 2048, 8192, 64);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  // No FIM_REP / FIM_SEP in StarCoder's vocabulary, no BOS added (GPT-2 style).
  EXPECT_EQ(*ids, Cat({{1}, enc(in.prefix), enc(in.prompt), {3}, enc(in.suffix), {2}}));
  // Other files: each after a snippet separator, before the prefix.
  in.extra = {{"util.py", "import os\n"}, {"b.py", "x = 1\n"}};
  ids = BuildInfillPrompt(*tok, in, 2048, 8192, 64);
  ASSERT_TRUE(ids.ok());
  const std::vector<int32_t> sep = enc("\n\n--- snippet ---\n\n");
  const std::vector<int32_t> extra = Cat({sep, enc("import os\n"), sep, enc("x = 1\n")});
  EXPECT_EQ(*ids, Cat({extra, {1}, enc(in.prefix), enc(in.prompt), {3}, enc(in.suffix), {2}}));
  // --spm-infill: the suffix part first.
  ids = BuildInfillPrompt(*tok, in, 2048, 8192, 64, /*spm_order=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Cat({extra, {3}, enc(in.suffix), {1}, enc(in.prefix), enc(in.prompt), {2}}));
  // Truncation: the prefix keeps its last 3/4 of the batch, the suffix its
  // first batch/4 - 2 - |prompt|, the extra files the last n_ctx - batch - 2 n_predict.
  std::string long_prefix, long_suffix;
  for (int i = 0; i < 200; ++i) long_prefix += "x" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  for (int i = 0; i < 200; ++i) long_suffix += "y" + std::to_string(i) + " = 0\n";
  in.prefix = long_prefix;
  in.suffix = long_suffix;
  const std::vector<int32_t> p = enc(long_prefix), s = enc(long_suffix), pr = enc(in.prompt);
  ASSERT_GT(p.size(), 96u);
  ASSERT_GT(s.size(), 32u);
  const int32_t n_batch = 128, n_ctx = 150, n_predict = 4;  // extra: 150 - 128 - 8 = 14 tokens
  ids = BuildInfillPrompt(*tok, in, n_batch, n_ctx, n_predict);
  ASSERT_TRUE(ids.ok());
  const std::vector<int32_t> want =
      Cat({std::vector<int32_t>(extra.end() - 14, extra.end()),
           {1},
           std::vector<int32_t>(p.end() - 96, p.end()),
           pr,
           {3},
           std::vector<int32_t>(s.begin(), s.begin() + (32 - 2 - static_cast<int64_t>(pr.size()))),
           {2}});
  EXPECT_EQ(*ids, want);
}

TEST(Infill, BosComesFirst) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  // DeepSeek Coder adds BOS (first). Neither vocabulary has FIM_REP /
  // FIM_SEP: the repository pattern is checked end to end, on a model file
  // given fim_rep / fim_sep keys (tests/e2e/test_server.py, InfillTest).
  auto ds = Vocab("deepseek-coder");
  ASSERT_NE(ds, nullptr);
  auto enc = [&](const std::string& s) { return ds->Encode(s, false, false); };
  InfillRequest in;
  in.prefix = "int main() {";
  in.suffix = "}";
  auto ids = BuildInfillPrompt(*ds, in, 2048, 4096, 0);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Cat({{32013, 32016}, enc(in.prefix), {32015}, enc(in.suffix), {32017}}));
}

TEST(Infill, FieldsAreTakenAndChecked) {
  nlohmann::json body = nlohmann::json::parse(
      R"({"input_prefix": "a", "input_suffix": "b", "prompt": "c", "input_extra": [{"filename": "f", "text": "t"},
          {"text": "u"}], "n_predict": 3})");
  InfillRequest in;
  ApiError err;
  ASSERT_TRUE(TakeInfillFields(&body, &in, &err)) << err.message;
  EXPECT_EQ((std::vector<std::string>{in.prefix, in.suffix, in.prompt}), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(in.extra.size(), 2u);
  EXPECT_EQ(in.extra[1], (std::pair<std::string, std::string>{"tmp", "u"}));  // llama-server's default name
  EXPECT_EQ(body, nlohmann::json::parse(R"({"n_predict": 3})"));              // the rest: a /completion request
  for (const char* bad : {R"({"input_prefix": 1})", R"({"input_extra": {}})", R"({"input_extra": [{"name": "x"}]})",
                          R"({"input_extra": [{"text": 2}]})", R"({"prompt": ["a"]})"}) {
    body = nlohmann::json::parse(bad);
    EXPECT_FALSE(TakeInfillFields(&body, &in, &err)) << bad;
    EXPECT_EQ(err.status, 400) << bad;
  }
}

}  // namespace
}  // namespace infera::server::infill_test
