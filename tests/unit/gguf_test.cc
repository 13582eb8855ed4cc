#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/file_util.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "formats/mmap_file.h"
#include "unit/test_util.h"

namespace infera::gguf_test {
namespace {

// Raw GGUF bytes for hand-made (often broken) files.
struct Bytes {
  std::string b;
  template <typename T> Bytes& put(T v) { b.append(reinterpret_cast<const char*>(&v), sizeof(T)); return *this; }
  Bytes& str(const std::string& s) { put<uint64_t>(s.size()); b += s; return *this; }
  Bytes& pad(size_t align) { b.resize((b.size() + align - 1) / align * align, '\0'); return *this; }
};

// Header with one u32 KV and the given tensor infos (name, dims, type, offset).
struct Info { std::string name; std::vector<uint64_t> ne; uint32_t type; uint64_t offset; };
Bytes MakeFile(const std::vector<Info>& infos, size_t data_bytes, uint32_t version = 3) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(infos.size()).put<uint64_t>(1);
  x.str("general.architecture").put<uint32_t>(8).str("llama");
  for (const auto& i : infos) {
    x.str(i.name).put<uint32_t>(i.ne.size());
    for (auto d : i.ne) x.put<uint64_t>(d);
    x.put<uint32_t>(i.type).put<uint64_t>(i.offset);
  }
  x.pad(32);
  x.b.append(data_bytes, '\x01');
  return x;
}

StatusOr<std::unique_ptr<GgufFile>> ParseBytes(const std::string& b) {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "test.gguf");
}

// Releasing pages of a mapping (after the weights were repacked) keeps the
// bytes readable: they come back from the file; ranges outside are ignored.
TEST(MappedFile, ReleasedPagesReadBackTheSame) {
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string path = testing::TempDir() + "/release.bin";
  ASSERT_TRUE(WriteStringToFile(path, bytes).ok());
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok());
  const uint8_t* d = (*m)->data();
  uint64_t before = 0;
  for (size_t i = 0; i < bytes.size(); ++i) before += d[i] * (i % 7 + 1);
  (*m)->Release(d + 1000, (2 << 20) + 5);      // unaligned: whole pages inside only
  (*m)->Release(d - 4096, 100);                // outside: ignored
  (*m)->Release(d + bytes.size() - 10, 4096);  // runs past the end: ignored
  uint64_t after = 0;
  for (size_t i = 0; i < bytes.size(); ++i) after += d[i] * (i % 7 + 1);
  EXPECT_EQ(before, after);
  EXPECT_EQ(std::memcmp(d, bytes.data(), bytes.size()), 0);
}

TEST(Gguf, WriterReaderRoundTrip) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("a.u32", 7);
  w.SetI32("a.i32", -3);
  w.SetF32("a.f32", 1.5f);
  w.SetBool("a.bool", true);
  w.SetStringArray("a.strs", {"x", "", "zz"});
  w.SetF32Array("a.floats", {1, 2, 3});
  GgufValue nested;
  nested.type = GgufType::kArray;
  nested.elem_type = GgufType::kArray;
  GgufValue inner;
  inner.type = GgufType::kArray;
  inner.elem_type = GgufType::kInt32;
  inner.arr_i = {4, 5};
  nested.arr_a = {inner, inner};
  w.SetValue("a.nested", nested);
  std::vector<float> t1 = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> t2(64, 0x3c00);
  w.AddTensor("t1", DType::kF32, {3, 2}, t1.data(), 24);
  w.AddTensor("t2", DType::kF16, {64}, t2.data(), 128);
  const std::string path = testing::TempDir() + "/rt.gguf";
  ASSERT_TRUE(w.Write(path).ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ((*f)->GetInt("a.u32"), 7);
  EXPECT_EQ((*f)->GetInt("a.i32"), -3);
  EXPECT_EQ((*f)->GetFloat("a.f32"), 1.5);
  EXPECT_EQ((*f)->GetBool("a.bool"), true);
  EXPECT_EQ((*f)->Find("a.strs")->arr_s, (std::vector<std::string>{"x", "", "zz"}));
  ASSERT_EQ((*f)->Find("a.nested")->arr_a.size(), 2u);
  EXPECT_EQ((*f)->Find("a.nested")->arr_a[1].arr_i, (std::vector<int64_t>{4, 5}));
  const TensorView* a = (*f)->FindTensor("t1");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(std::memcmp(a->data, t1.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->FindTensor("t2")->data) % 32, 0u);
}

// ggml reads the data section as the sum of the tensors' padded sizes, the
// last one's too: a file that ends after an unpadded last tensor is refused
// by llama.cpp (it was, for infera's imatrix files).
TEST(Gguf, WriterPadsTheLastTensor) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  const float one = 1.0f;
  w.AddTensor("last", DType::kF32, {1}, &one, 4);
  const std::string path = testing::TempDir() + "/pad.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->file_size() % 32, 0u);  // 4 bytes of data, then 28 of padding
}

TEST(Gguf, ValidHandMadeFileParses) {
  auto f = ParseBytes(MakeFile({{"w", {4, 2}, 0, 0}, {"v", {32}, 8, 32}}, 32 + 34).b);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->tensors().size(), 2u);
}

void ExpectError(const std::string& bytes, const std::string& needle) {
  auto f = ParseBytes(bytes);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().message();
}

TEST(Gguf, RejectsBadMagic) {
  Bytes x = MakeFile({}, 0);
  x.b[0] = 'X';
  ExpectError(x.b, "bad magic");
}

TEST(Gguf, RejectsVersions) {
  ExpectError(MakeFile({}, 0, 1).b, "version 1");
  ExpectError(MakeFile({}, 0, 99).b, "version 99");
}

TEST(Gguf, RejectsHugeCounts) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1ull << 60);
  ExpectError(x.b, "metadata count");
  Bytes y;
  y.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(1ull << 62).put<uint64_t>(0);
  ExpectError(y.b, "tensor count");
}

TEST(Gguf, RejectsHugeStringLength) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  x.str("k").put<uint32_t>(8).put<uint64_t>(1ull << 40);
  ExpectError(x.b, "truncated str");
}

TEST(Gguf, RejectsHugeArray) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  x.str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 50);
  ExpectError(x.b, "array length");
}

TEST(Gguf, RejectsUnknownTypes) {
  ExpectError(MakeFile({{"w", {4}, 77, 0}}, 32).b, "unknown type 77");
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  x.str("k").put<uint32_t>(13);
  ExpectError(x.b, "unknown metadata type 13");
}

TEST(Gguf, RejectsDataPastEnd) { ExpectError(MakeFile({{"w", {64, 64}, 0, 0}}, 100).b, "past the end"); }

TEST(Gguf, RejectsOverlap) { ExpectError(MakeFile({{"a", {16}, 0, 0}, {"b", {16}, 0, 32}}, 128).b, "overlap"); }

TEST(Gguf, RejectsMisalignedOffset) { ExpectError(MakeFile({{"a", {4}, 0, 4}}, 64).b, "not aligned"); }

TEST(Gguf, RejectsBadDims) {
  ExpectError(MakeFile({{"a", {1, 1, 1, 1, 1}, 0, 0}}, 64).b, "dims");
  ExpectError(MakeFile({{"a", {0}, 0, 0}}, 64).b, "invalid dim");
  ExpectError(MakeFile({{"a", {1ull << 30, 1ull << 30}, 0, 0}}, 64).b, "too many elements");
  ExpectError(MakeFile({{"a", {33}, 8, 0}}, 64).b, "block size");
}

TEST(Gguf, RejectsDuplicateTensor) { ExpectError(MakeFile({{"a", {4}, 0, 0}, {"a", {4}, 0, 32}}, 64).b, "duplicate"); }

TEST(Gguf, EveryTruncationFailsCleanly) {
  const std::string full = MakeFile({{"w", {4, 2}, 0, 0}, {"v", {32}, 8, 32}}, 32 + 34).b;
  for (size_t n = 0; n < full.size(); ++n) {
    auto f = ParseBytes(full.substr(0, n));
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(Gguf, OpenMissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(Gguf, ReadsRealLlamaCppFile) {
  if (!testing::SharedAvailable()) GTEST_SKIP() << "../shared not present";
  auto f = GgufFile::Open(testing::SharedDir() + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->tensors().size(), 48u);
  EXPECT_EQ((*f)->GetInt("llama.block_count"), 5);
  EXPECT_EQ((*f)->Find("tokenizer.ggml.tokens")->arr_s.size(), 512u);
}

}  // namespace
}  // namespace infera::gguf_test
