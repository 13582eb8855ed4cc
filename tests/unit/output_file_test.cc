// OutputFile and CheckOutputNotInput: outputs never replace inputs (same
// file, links, hard links, files of an input folder), and a file is replaced
// only when its new content is complete.
#include "base/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace infera::output_file_test {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("infera_output_file_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  static void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  static std::string Get(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int Entries() const { return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }
  fs::path dir_;
};

TEST_F(OutputFileTest, RefusesInputsThroughLinks) {
  Put(P("in"), "model");
  fs::create_symlink(P("in"), P("soft"));
  fs::create_hard_link(P("in"), P("hard"));
  Put(P("other"), "x");
  EXPECT_FALSE(CheckOutputNotInput(P("in"), {P("in")}).ok());
  EXPECT_FALSE(CheckOutputNotInput(P("soft"), {P("in")}).ok());
  EXPECT_FALSE(CheckOutputNotInput(P("hard"), {P("in")}).ok());
  EXPECT_FALSE(CheckOutputNotInput(P("in"), {"", P("soft")}).ok());
  EXPECT_TRUE(CheckOutputNotInput(P("other"), {P("in")}).ok());
  EXPECT_TRUE(CheckOutputNotInput(P("new"), {P("in")}).ok());
  EXPECT_TRUE(CheckOutputNotInput("/dev/null", {"/dev/null"}).ok());  // a device replaces no file
  // A file inside an input folder.
  fs::create_directories(P("hf"));
  Put(P("hf/model.safetensors"), "w");
  EXPECT_FALSE(CheckOutputNotInput(P("hf/model.safetensors"), {P("hf")}).ok());
  EXPECT_TRUE(CheckOutputNotInput(P("out.gguf"), {P("hf")}).ok());
}

TEST_F(OutputFileTest, ReplacesOnlyOnCommit) {
  Put(P("out"), "old");
  {
    auto f = OutputFile::Create(P("out"));
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write("half-written").ok());
    EXPECT_EQ(Get(P("out")), "old");  // not yet
    // destroyed without Commit: the old content stays, no temporary is left
  }
  EXPECT_EQ(Get(P("out")), "old");
  EXPECT_EQ(Entries(), 1);
  auto f = OutputFile::Create(P("out"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write("new").ok());
  ASSERT_TRUE((*f)->Commit().ok());
  EXPECT_EQ(Get(P("out")), "new");
  EXPECT_EQ(Entries(), 1);
}

TEST_F(OutputFileTest, WritesThroughALinkAndKeepsModes) {
  Put(P("target"), "old");
  chmod(P("target").c_str(), 0640);
  fs::create_symlink(P("target"), P("link"));
  ASSERT_TRUE(WriteFileAtomically(P("link"), "new").ok());
  EXPECT_TRUE(fs::is_symlink(P("link")));
  EXPECT_EQ(Get(P("target")), "new");
  struct stat st;
  ASSERT_EQ(stat(P("target").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // A new file gets the usual 0666 & ~umask, not mkstemp's 0600.
  const mode_t mask = umask(022);
  ASSERT_TRUE(WriteFileAtomically(P("fresh"), "x").ok());
  umask(mask);
  ASSERT_EQ(stat(P("fresh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(OutputFileTest, DevicesAreWrittenInPlaceAndErrorsReported) {
  EXPECT_TRUE(WriteFileAtomically("/dev/null", "discarded").ok());
  Status full = WriteFileAtomically("/dev/full", std::string(1 << 16, 'x'));
  EXPECT_FALSE(full.ok());
  EXPECT_FALSE(OutputFile::Create(dir_.string()).ok());                 // a directory
  EXPECT_FALSE(OutputFile::Create(P("missing-dir/out")).ok());           // no such folder
}

}  // namespace
}  // namespace infera::output_file_test
