// Model loading refuses files whose metadata or tensors disagree with the
// architecture, naming the file and the problem.
#include <gtest/gtest.h>

#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "base/file_util.h"
#include "model/loader.h"
#include "unit/test_util.h"

namespace infera::loader_test {
namespace {

// Copies `src` to a new GGUF, dropping key `drop_key` and tensor
// `drop_tensor`, and replacing the shape of tensor `reshape` by `ne`.
std::string Rewrite(const std::string& src, const std::string& name, const std::string& drop_key,
                    const std::string& drop_tensor, const std::string& reshape = "",
                    std::vector<int64_t> ne = {}) {
  auto f = GgufFile::Open(src);
  EXPECT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& [k, v] : (*f)->metadata()) {
    if (k != drop_key) w.SetValue(k, v);
  }
  for (const auto& t : (*f)->tensors()) {
    if (t.name == drop_tensor) continue;
    w.AddTensor(t.name, t.type, t.name == reshape ? ne : t.ne, t.data, t.nbytes);
  }
  const std::string out = testing::TempDir() + "/" + name;
  EXPECT_TRUE(w.Write(out).ok());
  return out;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = testing::WriteTinyModel(testing::TinyConfig(), DType::kF32, 3, "loader_base.gguf"); }
  void ExpectRefused(const std::string& path, const std::string& needle) {
    auto m = LoadModel(path);
    ASSERT_FALSE(m.ok()) << path;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
  }
  std::string base_;
};

TEST_F(LoaderTest, LoadsValidModel) {
  auto m = LoadModel(base_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config.n_layer, 2);
  EXPECT_EQ((*m)->config.n_head_kv, 2);
}

TEST_F(LoaderTest, RefusesMissingRequiredKey) {
  ExpectRefused(Rewrite(base_, "no_blocks.gguf", "llama.block_count", ""), "missing required key llama.block_count");
  ExpectRefused(Rewrite(base_, "no_arch.gguf", "general.architecture", ""), "general.architecture");
}

TEST_F(LoaderTest, RefusesMissingTensor) {
  ExpectRefused(Rewrite(base_, "no_q.gguf", "", "blk.1.attn_q.weight"), "missing required tensor 'blk.1.attn_q.weight'");
}

TEST_F(LoaderTest, RefusesShapeThatDisagreesWithConfig) {
  auto f = GgufFile::Open(base_);
  const TensorView* t = (*f)->FindTensor("blk.0.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  // Same byte count, transposed shape.
  ExpectRefused(Rewrite(base_, "bad_shape.gguf", "", "", "blk.0.ffn_up.weight", {t->ne[1], t->ne[0]}),
                "has shape");
}

TEST_F(LoaderTest, RefusesVocabOnlyFile) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto m = LoadModel(testing::SharedDir() + "/data/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no tensors"), std::string::npos) << m.status().message();
}

TEST_F(LoaderTest, ReadsGgufVersion2) {
  // v2 and v3 share the little-endian layout; patch the version field.
  auto bytes = ReadFileToString(base_);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[4] = 2;
  const std::string v2 = testing::TempDir() + "/v2.gguf";
  ASSERT_TRUE(WriteStringToFile(v2, *bytes).ok());
  auto m = LoadModel(v2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->gguf->version(), 2u);
}

TEST_F(LoaderTest, LoadsRealTinyRandomLlama) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  auto m = LoadModel(testing::SharedDir() + "/models/tiny-random-llama2/llama-2-tiny-random.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config.n_vocab, 32000);
}

}  // namespace
}  // namespace infera::loader_test
