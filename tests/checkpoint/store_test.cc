// The checkpoint directory protocol on real files: commit, verification, fallback, pruning.
// Checkpoints are written as the workers write them: tensor files by TorchZipWriter into
// step-N.partial, then Commit. A save cut short at each of its steps is proven on the real
// Checkpointer (tests/worker/checkpointer_test.cc).
#include "checkpoint/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"
#include "checkpoint/torch_zip.h"
#include "tests/common/run_helpers.h"

namespace mitra::checkpoint {
namespace {
namespace fs = std::filesystem;

Manifest TwoSegmentManifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.stages = 2;
  m.replicas = 3;
  m.partition = "1,1";
  m.schedule = "1f1b";
  m.segments = {"a", "b"};
  return m;
}

// A segment's tensors at `step`: its values depend on both.
std::vector<float> SegmentValues(const std::string& segment, int64_t step) {
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(i) + static_cast<float>(step) * 0.5f +
                static_cast<float>(segment.front());
  }
  return values;
}

class CheckpointStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Path("checkpoints");
    fs::create_directories(dir_);
  }

  // Writes a checkpoint of `step` as the workers do: each segment's tensor file into
  // step-N.partial through the file-system seam, then (unless `commit` is false) Commit.
  void Write(int64_t step, bool commit = true) {
    const std::string partial = PartialDirectory(dir_, step);
    ASSERT_TRUE(disk_.CreateDirectories(partial).ok());
    Manifest m = TwoSegmentManifest(step);
    for (const std::string& seg : m.segments) {
      auto writer = TorchZipWriter::Create(disk_, JoinPath(partial, SegmentFileName(seg)));
      ASSERT_TRUE(writer.ok()) << writer.status().message();
      const std::vector<float> values = SegmentValues(seg, step);
      ASSERT_TRUE((*writer)->Add("param/w", DType::kFloat32, {8, 8}, values.data()).ok());
      auto written = (*writer)->Finish();
      ASSERT_TRUE(written.ok()) << written.status().message();
      m.files.push_back({SegmentFileName(seg), written->bytes, written->crc32c, written->tensors});
    }
    if (commit) {
      ASSERT_TRUE(Commit(disk_, dir_, m).ok());
    }
  }

  testing::TempDir tmp_;
  std::string dir_;
  PosixFileSystem disk_;
};

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  // Extending equals hashing the concatenation.
  EXPECT_EQ(Crc32c("56789", Crc32c("1234")), Crc32c("123456789"));
}

TEST(Manifest, RoundTripsAndDetectsTruncationAndDamage) {
  Manifest m;
  m.step = 42;
  m.partition = "1,4,4,3";
  m.segments = {"embed", "block0"};
  m.files = {{"seg-embed.pt", 4200, 0xdeadbeef,
              {{"param/wte.weight", DType::kFloat32, {256, 4}, 64},
               {"step/wte.weight", DType::kInt64, {}, 4160}}},
             {"trainer.pt", 10, 0x1, {}}};
  const std::string text = m.Serialize();
  auto back = Manifest::Parse(text, "M");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->partition, "1,4,4,3");
  EXPECT_EQ(back->segments, m.segments);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[0].crc32c, 0xdeadbeefu);
  EXPECT_EQ(back->files[0].tensors, m.files[0].tensors);
  EXPECT_TRUE(back->files[1].tensors.empty());
  EXPECT_NE(text.find("tensor param/wte.weight f32 [256,4] 64\n"), std::string::npos) << text;

  auto truncated = Manifest::Parse(text.substr(0, text.size() / 2), "M");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  std::string damaged = text;
  damaged[damaged.find("42")] = '7';
  EXPECT_NE(Manifest::Parse(damaged, "M").status().message().find("checksum"), std::string::npos);
}

TEST(Manifest, KeepsThatTheModelsKeysAreTheNamesWithinItsSegments) {
  Manifest m;
  m.segments = {"segment0"};
  EXPECT_EQ(m.Serialize().find("keys"), std::string::npos);  // absent unless set
  EXPECT_FALSE(Manifest::Parse(m.Serialize(), "M")->module_keys);
  m.module_keys = true;
  const std::string text = m.Serialize();
  EXPECT_NE(text.find("\nkeys module\n"), std::string::npos) << text;
  EXPECT_TRUE(Manifest::Parse(text, "M")->module_keys);
}

TEST(Manifest, AnotherFormatVersionIsRefusedSayingWhich) {
  std::string text = Manifest().Serialize();
  text.replace(0, text.find('\n'), "mitra-checkpoint 1");
  auto old = Manifest::Parse(text, "step-4/MANIFEST");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("step-4/MANIFEST: written in checkpoint format '1'"),
            std::string::npos)
      << old.status().message();
}

TEST(Manifest, MalformedTensorLineIsDamage) {
  std::vector<FileEntry> files;
  EXPECT_FALSE(ParseFileLine("tensor a f32 [1] 0", &files).ok());  // before any file line
  ASSERT_TRUE(ParseFileLine("file seg-a.pt 100 0000abcd", &files).ok());
  EXPECT_FALSE(ParseFileLine("tensor a f33 [1] 0", &files).ok());
  EXPECT_FALSE(ParseFileLine("tensor a f32 [1,] 0", &files).ok());
  EXPECT_FALSE(ParseFileLine("tensor a f32 1,2 0", &files).ok());
  ASSERT_TRUE(ParseFileLine("tensor a bf16 [3,0,2] 64", &files).ok());
  EXPECT_EQ(files[0].tensors[0].shape, (std::vector<int64_t>{3, 0, 2}));
}

// A manifest names files of its own directory that mitra writes, and nothing else: not a path
// out of it, not an absolute one, not a name a reader could take for two fields.
TEST(Manifest, ListsOnlyTheFilesMitraWritesInItsOwnDirectory) {
  std::vector<FileEntry> files;
  for (const char* name : {"seg-embed.pt", "seg-block_0-x.pt", "trainer.pt"}) {
    EXPECT_TRUE(ParseFileLine(std::string("file ") + name + " 100 0000abcd", &files).ok()) << name;
  }
  for (const char* name : {"../../outside/evil.bin", "/etc/passwd", "seg-a/b.pt", "seg-.pt",
                           "seg-..pt", "seg-a.pt.bak", "trainer.pt/x", "MANIFEST", "evil.bin"}) {
    const Status s = ParseFileLine(std::string("file ") + name + " 100 0000abcd", &files);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("names a file mitra does not write"), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(IsCheckpointFileName(SegmentFileName("head")));
}

TEST_F(CheckpointStore, CommittedCheckpointVerifiesAndPartialOneIsNeverListed) {
  Write(10);
  Write(20, /*commit=*/false);  // a writer died before the manifest
  EXPECT_EQ(ListSteps(dir_), std::vector<int64_t>{10});
  auto found = FindNewestValid(dir_, nullptr);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->step, 10);
  EXPECT_EQ(found->manifest.replicas, 3);
}

TEST_F(CheckpointStore, CorruptFileFallsBackToThePreviousCheckpointNamingTheFile) {
  Write(10);
  Write(20);
  const std::string victim = StepDirectory(dir_, 20) + "/seg-b.pt";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
  }
  std::vector<std::string> skipped;
  auto found = FindNewestValid(dir_, &skipped);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->step, 10);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find(victim), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("checksum"), std::string::npos) << skipped[0];
}

TEST_F(CheckpointStore, TruncatedManifestOrMissingFileFallsBack) {
  Write(10);
  Write(20);
  Write(30);
  fs::resize_file(StepDirectory(dir_, 30) + "/" + kManifestName, 40);
  fs::remove(StepDirectory(dir_, 20) + "/seg-a.pt");
  std::vector<std::string> skipped;
  auto found = FindNewestValid(dir_, &skipped);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->step, 10);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("truncated"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("seg-a.pt is missing"), std::string::npos) << skipped[1];
}

// A listed file that is a FIFO (or a link to one) is refused at once: verifying it used to wait
// for a writer forever.
TEST_F(CheckpointStore, AListedFileThatIsAFifoOrALinkIsRefusedAtOnce) {
  Write(10);
  Write(20);
  Write(30);
  const std::string fifo = StepDirectory(dir_, 30) + "/seg-a.pt";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = StepDirectory(dir_, 20) + "/seg-b.pt";
  fs::rename(link, tmp_.Path("elsewhere.pt"));
  fs::create_symlink(tmp_.Path("elsewhere.pt"), link);
  std::vector<std::string> skipped;
  auto found = FindNewestValid(dir_, &skipped);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->step, 10);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("is a FIFO, not a regular file"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("is a symbolic link"), std::string::npos) << skipped[1];
}

TEST_F(CheckpointStore, NoCheckpointIsNotFound) {
  EXPECT_EQ(FindNewestValid(dir_, nullptr).status().code(), Status::Code::kNotFound);
}

TEST_F(CheckpointStore, AHeldStepNoCheckpointIsNewerThanIsResumedWithoutReadingStorage) {
  Write(10);
  Write(20);
  {  // damaged: only a verification would notice
    std::fstream f(StepDirectory(dir_, 20) + "/seg-b.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
  }
  int verified = 0;
  const auto find = [&] {
    ++verified;
    return FindNewestValid(disk_, dir_, nullptr);
  };
  EXPECT_EQ(ResumeStep(disk_, dir_, 20, find), 20);
  EXPECT_EQ(ResumeStep(disk_, dir_, 25, find), 25);
  EXPECT_EQ(verified, 0);
  // A newer checkpoint than the held step is verified: the damaged 20 is skipped for 10, and
  // the held 15 is newer than that.
  EXPECT_EQ(ResumeStep(disk_, dir_, 15, find), 15);
  EXPECT_EQ(ResumeStep(disk_, dir_, 5, find), 10);
  EXPECT_EQ(ResumeStep(disk_, dir_, std::nullopt, find), 10);
  EXPECT_EQ(verified, 3);
}

TEST_F(CheckpointStore, PruneKeepsTheNewestAndDropsStalePartials) {
  for (int step : {10, 20, 30, 40}) Write(step);
  Write(5, /*commit=*/false);
  Write(50, /*commit=*/false);  // maybe still being written: newer than every complete one
  ASSERT_TRUE(Prune(dir_, 2).ok());
  EXPECT_EQ(ListSteps(dir_), (std::vector<int64_t>{40, 30}));
  EXPECT_FALSE(fs::exists(PartialDirectory(dir_, 5)));
  EXPECT_TRUE(fs::exists(PartialDirectory(dir_, 50)));
}

TEST_F(CheckpointStore, VerifyFilesChecksOnlyWhatAWorkerReadsButRequiresItListed) {
  Write(10);
  const std::string path = StepDirectory(dir_, 10);
  fs::remove(path + "/seg-b.pt");
  EXPECT_TRUE(VerifyFiles(path, {"seg-a.pt"}).ok());
  EXPECT_FALSE(VerifyFiles(path, {"seg-b.pt"}).ok());
  auto unlisted = VerifyFiles(path, {"trainer.pt"});
  ASSERT_FALSE(unlisted.ok());
  EXPECT_NE(unlisted.status().message().find("does not list trainer.pt"), std::string::npos);
}

// Every rank of a job checks the directory at the same moment.
TEST(CheckWritable, ManyRanksCheckTheSameDirectoryAtOnce) {
  testing::TempDir tmp;
  const std::string dir = tmp.Path("checkpoints");
  std::vector<std::thread> ranks;
  std::atomic<int> failed{0};
  for (int r = 0; r < 8; ++r) {
    ranks.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (!CheckWritable(dir).ok()) ++failed;
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_TRUE(ListSteps(dir).empty());
}

TEST(CheckpointFiles, UnwritableDirectoryIsRejectedWithTheFix) {
  Status s = CheckWritable("/proc/mitra-checkpoints");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--checkpoint-dir"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mitra::checkpoint
