#include "common/file_system.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

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
  EXPECT_EQ(*fs.ListDirectory(dir.path()), std::vector<std::string>{"state.json"});
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

// The modes of what mitra creates: the owner's alone.
mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(PosixFileSystem, WhatItCreatesOnlyItsOwnerMayReadOrWrite) {
  TempDir dir;
  PosixFileSystem fs;
  ASSERT_TRUE(fs.CreateDirectories(dir.Path("run/logs")).ok());
  ASSERT_TRUE(fs.WriteFileAtomically(dir.Path("run/state.json"), "{}").ok());
  ASSERT_TRUE(fs.OpenForAppend(dir.Path("run/events.jsonl")).ok());
  ASSERT_TRUE(fs.NewWritableFile(dir.Path("run/seg-a.pt"), /*direct=*/false).ok());
  EXPECT_EQ(ModeOf(dir.Path("run")), 0700u);
  EXPECT_EQ(ModeOf(dir.Path("run/logs")), 0700u);
  for (const char* file : {"run/state.json", "run/events.jsonl", "run/seg-a.pt"}) {
    EXPECT_EQ(ModeOf(dir.Path(file)), 0600u) << file;
  }
}

// A link someone left where mitra writes is never written through: the file it points at keeps
// its contents.
TEST(PosixFileSystem, NoWriteFollowsALinkLeftInItsPlace) {
  TempDir dir;
  PosixFileSystem fs;
  const std::string victim = dir.Write("victim", "precious");
  ASSERT_EQ(::symlink(victim.c_str(), dir.Path("state.json.tmp").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), dir.Path("events.jsonl").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), dir.Path("seg-a.pt").c_str()), 0);

  EXPECT_TRUE(fs.WriteFileAtomically(dir.Path("state.json"), "{}").ok());  // a name of its own
  Result<std::unique_ptr<AppendableFile>> events = fs.OpenForAppend(dir.Path("events.jsonl"));
  ASSERT_FALSE(events.ok());
  EXPECT_NE(events.status().message().find("is a symbolic link"), std::string::npos)
      << events.status().message();
  Result<std::unique_ptr<WritableFile>> segment =
      fs.NewWritableFile(dir.Path("seg-a.pt"), /*direct=*/false);
  ASSERT_FALSE(segment.ok());
  EXPECT_NE(segment.status().message().find("remove the link"), std::string::npos)
      << segment.status().message();
  EXPECT_EQ(*fs.ReadFile(victim), "precious");
}

// A FIFO is refused at once, by readers and writers, where opening it would wait for a peer
// forever.
TEST(PosixFileSystem, AFifoIsRefusedAtOnceNotWaitedOn) {
  TempDir dir;
  PosixFileSystem fs;
  const std::string fifo = dir.Path("MANIFEST");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::string> read = fs.ReadFile(fifo);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("is a FIFO, not a regular file"), std::string::npos)
      << read.status().message();
  EXPECT_FALSE(fs.OpenForAppend(fifo).ok());
  EXPECT_FALSE(fs.NewWritableFile(fifo, /*direct=*/false).ok());
}

TEST(CheckOwnDirectory, RefusesADirectoryAnyUserMayWriteAndNamesTheFix) {
  TempDir dir;
  PosixFileSystem fs;
  ASSERT_TRUE(fs.CreateDirectories(dir.Path("run")).ok());
  EXPECT_TRUE(CheckOwnDirectory(fs, dir.Path("run"), "run directory", "--run-dir").ok());
  EXPECT_TRUE(CheckOwnDirectory(fs, dir.Path("missing"), "run directory", "--run-dir").ok());
  ASSERT_EQ(::chmod(dir.Path("run").c_str(), 0777), 0);
  const Status s = CheckOwnDirectory(fs, dir.Path("run"), "run directory", "--run-dir");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("may be written by any user (mode 0777)"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("chmod o-w"), std::string::npos) << s.message();

  ASSERT_EQ(::chmod(dir.Path("run").c_str(), 01777), 0);  // shared, like /tmp
  const Status shared = CheckOwnDirectory(fs, dir.Path("run"), "run directory", "--run-dir");
  EXPECT_NE(shared.message().find("is shared by every user (mode 1777)"), std::string::npos)
      << shared.message();
  EXPECT_NE(shared.message().find("pass --run-dir with a directory of your own, e.g. " +
                                  dir.Path("run/mine")),
            std::string::npos)
      << shared.message();
}

TEST(CheckOwnDirectory, RefusesADirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  TempDir dir;
  PosixFileSystem fs;
  ASSERT_TRUE(fs.CreateDirectories(dir.Path("theirs")).ok());
  ASSERT_EQ(::chown(dir.Path("theirs").c_str(), 65534, 65534), 0);  // nobody
  const Status s =
      CheckOwnDirectory(fs, dir.Path("theirs"), "checkpoint directory", "--checkpoint-dir");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("belongs to another user (uid 65534)"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--checkpoint-dir"), std::string::npos) << s.message();
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
