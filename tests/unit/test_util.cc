#include "unit/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/paths.h"
#include "formats/gguf_reader.h"
#include "model/random_model.h"
#include "tokenizer/loader.h"

namespace infera::testing {
namespace {
struct TempRoot {
  std::string path;
  TempRoot() {
    char tmpl[] = "/tmp/infera_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string TempDir() {
  static TempRoot root;
  return root.path;
}

std::string SharedDir() { return INFERA_SHARED_DIR; }
bool SharedAvailable() { return std::filesystem::exists(SharedDir() + "/models/stories260K/stories260K.gguf"); }

ModelConfig TinyConfig() {
  ModelConfig c = *RandomModelShape("tiny");
  c.n_embd = 64;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.n_ff = 96;
  c.n_layer = 2;
  c.n_vocab = 320;
  return c;
}

ModelConfig TinyArchConfig(const ArchInfo& arch) {
  ModelConfig c = TinyConfig();
  ApplyArchShape(arch, &c);
  c.n_ctx_train = 256;
  if (arch.arch == Arch::kMixtral || arch.arch == Arch::kQwen2Moe || arch.arch == Arch::kQwen3Moe) {
    c.n_expert = 4;
    c.n_expert_used = 2;
    c.n_ff_exp = 32;
    c.n_ff_shexp = arch.arch == Arch::kQwen2Moe ? 48 : 0;
  }
  return c;
}

std::string WriteTinyModel(const ModelConfig& c, DType type, uint64_t seed, const std::string& name) {
  const std::string path = TempDir() + "/" + name;
  Status st = WriteRandomGguf(c, MakeSyntheticVocab(c.n_vocab), type, seed, path);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}

std::vector<float> RandomVec(int64_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> v = {CpuIsa::kScalar};
  const CpuIsa best = DetectCpuFeatures().MaxIsa();
  if (best >= CpuIsa::kAvx2) v.push_back(CpuIsa::kAvx2);
  if (best >= CpuIsa::kAvx512) v.push_back(CpuIsa::kAvx512);
  if (best >= CpuIsa::kAmx) v.push_back(CpuIsa::kAmx);
  return v;
}

std::unique_ptr<Tokenizer> DefaultTokenizer() {
  auto path = FindDefaultModel();
  EXPECT_TRUE(path.ok()) << path.status().ToString();
  if (!path.ok()) return nullptr;
  auto g = GgufFile::Open(*path);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return nullptr;
  auto t = TokenizerFromGguf(**g);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

}  // namespace infera::testing
