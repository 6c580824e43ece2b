#include "common/file_system.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/common/run_helpers.h"

namespace mitra {
namespace {

using testing::TempDir;

TEST(PosixFileSystem, CreatesNestedDirectoriesAndAcceptsExistingOnes) {
  TempDir dir;
  PosixFileSystem fs;
  const std::string nested = dir.Path("a/b/c");
  ASSERT_TRUE(fs.CreateDirectories(nested).ok());
  EXPECT_TRUE(fs.IsDirectory(nested));
  EXPECT_TRUE(fs.CreateDirectories(nested).ok());
}

TEST(PosixFileSystem, RefusesADirectoryWhereAFileIs) {
  TempDir dir;
  PosixFileSystem fs;
  dir.Write("file", "x");
  const Status s = fs.CreateDirectories(dir.Path("file/sub"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a directory"), std::string::npos) << s.message();
}

TEST(PosixFileSystem, WritesAtomicallyAndLeavesNoTemporaryFile) {
  TempDir dir;
  PosixFileSystem fs;
  const std::string path = dir.Path("state.json");
  ASSERT_TRUE(fs.WriteFileAtomically(path, "old").ok());
  ASSERT_TRUE(fs.WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(*fs.ReadFile(path), "new");
  EXPECT_FALSE(fs.Exists(path + ".tmp"));
}

TEST(PosixFileSystem, AtomicWriteIntoAMissingDirectoryFailsCleanly) {
  TempDir dir;
  PosixFileSystem fs;
  const Status s = fs.WriteFileAtomically(dir.Path("missing/state.json"), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing/state.json.tmp"), std::string::npos) << s.message();
}

TEST(PosixFileSystem, AppendsAndReads) {
  TempDir dir;
  PosixFileSystem fs;
  const std::string path = dir.Path("events.jsonl");
  {
    Result<std::unique_ptr<AppendableFile>> f = fs.OpenForAppend(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("a\n").ok());
    EXPECT_EQ(*fs.ReadFile(path), "a\n");  // visible before close
  }
  Result<std::unique_ptr<AppendableFile>> again = fs.OpenForAppend(path);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Append("b\n").ok());
  EXPECT_EQ(*fs.ReadFile(path), "a\nb\n");
}

TEST(PosixFileSystem, ReadingAMissingFileIsNotFound) {
  TempDir dir;
  PosixFileSystem fs;
  Result<std::string> r = fs.ReadFile(dir.Path("nope"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
}

TEST(Paths, JoinAndNormalize) {
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a", "/abs"), "/abs");
  EXPECT_EQ(NormalizePath("/work/./mitra-run/"), "/work/mitra-run");
  EXPECT_EQ(NormalizePath("/a/b/../c//d"), "/a/c/d");
  EXPECT_EQ(NormalizePath("/.."), "/");
  EXPECT_EQ(NormalizePath("a/../.."), "..");
  EXPECT_EQ(NormalizePath("./"), ".");
}

}  // namespace
}  // namespace mitra
