// MachineListWatcher's decisions against real files and the real inotify, with time on a
// ManualClock: the test calls Tick() where the watcher's thread would wake, so the debounce and
// the poll interval are checked exactly and nothing sleeps. The edits mimic what editors and
// tools do to a file: write in place, write a temporary file and rename it over, truncate and
// then write, touch, delete and recreate. (machine_list_watcher_thread_test.cc runs the thread.)
#include "run/machine_list_watcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "common/clock.h"
#include "tests/common/run_helpers.h"

namespace mitra::run {
namespace {

constexpr double kDebounce = 0.2;
constexpr double kPoll = 1.0;
constexpr double kJustOver = 0.001;  // past a deadline, whatever the rounding of the sums

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

class MachineListWatcherTest : public ::testing::Test {
 protected:
  std::string ListPath() const { return dir_.Path("machines.txt"); }

  // Opens a watcher on machines.txt (no thread) that collects every report in `changes_`.
  std::unique_ptr<MachineListWatcher> OpenWatcher(WatcherOptions options) {
    options.debounce_s = kDebounce;
    options.poll_interval_s = kPoll;
    auto watcher = std::make_unique<MachineListWatcher>(
        ListPath(), std::move(options),
        [this](const std::string& contents) { changes_.push_back(contents); }, &clock_);
    EXPECT_TRUE(watcher->Open().ok());
    return watcher;
  }
  std::unique_ptr<MachineListWatcher> OpenWatcher() { return OpenWatcher(WatcherOptions{}); }

  // Moves the clock by `seconds` and lets the watcher wake up, as its thread would.
  void After(MachineListWatcher& watcher, double seconds) {
    clock_.Advance(seconds);
    watcher.Tick();
  }

  testing::TempDir dir_;
  ManualClock clock_;
  std::vector<std::string> changes_;
};

TEST_F(MachineListWatcherTest, AnEditIsReportedOnceTheFileHasBeenQuietForTheDebounce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  ASSERT_TRUE(watcher->using_inotify());
  WriteFile(ListPath(), "localhost slots=3\n");
  After(*watcher, 0);  // the inotify event: the quiet period starts
  EXPECT_DOUBLE_EQ(watcher->NextWake(), clock_.MonotonicSeconds() + kDebounce);
  After(*watcher, kDebounce - 0.01);
  EXPECT_TRUE(changes_.empty()) << "read before the file was quiet for the debounce";
  After(*watcher, 0.01 + kJustOver);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=3\n"});
  After(*watcher, 10 * kPoll);
  EXPECT_EQ(changes_.size(), 1u);
}

TEST_F(MachineListWatcherTest, ActivityWithinTheDebounceDelaysTheReadAndCountsOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  ASSERT_EQ(::truncate(ListPath().c_str(), 0), 0);  // `echo > f`: truncate, then write
  After(*watcher, 0);
  clock_.Advance(0.15);
  {
    std::ofstream out(ListPath(), std::ios::binary | std::ios::app);
    out << "localhost slots=5\n";
  }
  watcher->Tick();  // a new quiet period from here
  After(*watcher, 0.15);
  EXPECT_TRUE(changes_.empty()) << "read the half-written file";
  After(*watcher, kDebounce - 0.15 + kJustOver);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=5\n"});
  EXPECT_EQ(watcher->settled_checks(), 1);
}

TEST_F(MachineListWatcherTest, AWriteAndRenameOverIsReportedOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  // sed -i: a temporary file in the same directory, renamed over the list.
  WriteFile(dir_.Path("sedAbC123"), "localhost slots=4\n");
  ASSERT_EQ(::rename(dir_.Path("sedAbC123").c_str(), ListPath().c_str()), 0);
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  After(*watcher, 10 * kPoll);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=4\n"});
}

TEST_F(MachineListWatcherTest, AVimStyleSaveIsReportedOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  // vim: a probe file "4913", the old file renamed to a backup, a new file written.
  WriteFile(dir_.Path("4913"), "");
  ASSERT_EQ(::unlink(dir_.Path("4913").c_str()), 0);
  ASSERT_EQ(::rename(ListPath().c_str(), dir_.Path("machines.txt~").c_str()), 0);
  WriteFile(ListPath(), "localhost slots=1\n");
  ASSERT_EQ(::unlink(dir_.Path("machines.txt~").c_str()), 0);
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  After(*watcher, 10 * kPoll);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=1\n"});
}

TEST_F(MachineListWatcherTest, TouchingOrRewritingTheSameBytesReportsNothing) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  ASSERT_EQ(::utimensat(AT_FDCWD, ListPath().c_str(), nullptr, 0), 0);  // touch
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(watcher->settled_checks(), 1) << "the touch was not noticed";
  WriteFile(ListPath(), "localhost slots=2\n");
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(watcher->settled_checks(), 2) << "the rewrite was not noticed";
  EXPECT_TRUE(changes_.empty());
}

TEST_F(MachineListWatcherTest, OtherFilesInTheDirectoryAreIgnored) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  WriteFile(dir_.Path("notes.txt"), "hello\n");
  WriteFile(dir_.Path("machines.txt.bak"), "localhost slots=9\n");
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(watcher->settled_checks(), 0);
  WriteFile(ListPath(), "localhost slots=3\n");
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=3\n"});
  EXPECT_EQ(watcher->settled_checks(), 1);
}

TEST_F(MachineListWatcherTest, ADeletedListIsReportedWhenItReappears) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  ASSERT_EQ(::unlink(ListPath().c_str()), 0);
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(watcher->settled_checks(), 1) << "the deletion was not noticed";
  EXPECT_TRUE(changes_.empty());
  WriteFile(ListPath(), "localhost slots=6\n");
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=6\n"});
}

TEST_F(MachineListWatcherTest, ARecreatedListWithTheSameContentsIsNoChange) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  ASSERT_EQ(::unlink(ListPath().c_str()), 0);
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  WriteFile(ListPath(), "localhost slots=2\n");
  After(*watcher, 0);
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(watcher->settled_checks(), 2);
  EXPECT_TRUE(changes_.empty());
}

TEST_F(MachineListWatcherTest, PollingAloneSeesAChangeAtTheNextPoll) {
  WriteFile(ListPath(), "localhost slots=2\n");
  WatcherOptions options;
  options.use_inotify = false;
  auto watcher = OpenWatcher(options);
  EXPECT_FALSE(watcher->using_inotify());
  // Seen by stat(): a new size (mtime alone may not move within a coarse timestamp tick).
  WriteFile(ListPath(), "localhost slots=12\n");
  After(*watcher, 0);
  After(*watcher, kPoll - 0.01);
  EXPECT_EQ(watcher->settled_checks(), 0) << "looked before the poll was due";
  After(*watcher, 0.01 + kJustOver);  // the poll: the quiet period starts
  After(*watcher, kDebounce + kJustOver);
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=12\n"});
}

TEST_F(MachineListWatcherTest, WakesForTheNextPollOrTheEndOfTheQuietPeriodWhicheverIsFirst) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  const double opened = clock_.MonotonicSeconds();
  EXPECT_DOUBLE_EQ(watcher->NextWake(), opened + kPoll);
  WriteFile(ListPath(), "localhost slots=3\n");
  After(*watcher, 0.9);  // the event, read late: the quiet period would end after the poll
  EXPECT_DOUBLE_EQ(watcher->NextWake(), opened + kPoll);
  After(*watcher, 0.1 + kJustOver);  // the poll: the file is unchanged since the event
  EXPECT_TRUE(changes_.empty());
  EXPECT_DOUBLE_EQ(watcher->NextWake(), opened + 0.9 + kDebounce);
}

TEST_F(MachineListWatcherTest, ABaselineThatDiffersIsReportedAtTheFirstWakeUp) {
  WriteFile(ListPath(), "localhost slots=4\n");
  WatcherOptions options;
  options.baseline = "localhost slots=2\n";  // what the manager parsed before the edit
  auto watcher = OpenWatcher(options);
  EXPECT_DOUBLE_EQ(watcher->NextWake(), clock_.MonotonicSeconds());
  watcher->Tick();
  EXPECT_EQ(changes_, std::vector<std::string>{"localhost slots=4\n"});
}

TEST_F(MachineListWatcherTest, ASecondOpenIsRefused) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = OpenWatcher();
  EXPECT_FALSE(watcher->Open().ok());
  watcher->Stop();
  EXPECT_FALSE(watcher->Start().ok()) << "a stopped watcher does not start again";
}

}  // namespace
}  // namespace mitra::run
