// MachineListWatcher against real files, the real inotify and real threads. The edits mimic
// what editors and tools do to a file: write in place, write a temporary file and rename it
// over, truncate and then write, touch, delete and recreate.
#include "manager/machine_list_watcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/blocking_queue.h"
#include "tests/manager/run_helpers.h"

namespace mitra::manager {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

class MachineListWatcherTest : public ::testing::Test {
 protected:
  std::string ListPath() const { return dir_.Path("machines.txt"); }

  // Starts a watcher on machines.txt that pushes every report onto `changes_`.
  std::unique_ptr<MachineListWatcher> StartWatcher(WatcherOptions options) {
    auto watcher = std::make_unique<MachineListWatcher>(
        ListPath(), std::move(options),
        [this](const std::string& contents) { changes_.Push({contents, SteadyClock::now()}); });
    EXPECT_TRUE(watcher->Start().ok());
    return watcher;
  }

  static WatcherOptions Fast() {
    WatcherOptions options;
    options.debounce_s = 0.1;
    options.poll_interval_s = 0.5;
    return options;
  }

  // The next report's contents, or "<nothing>" when none comes within `timeout_s`.
  std::string NextChange(double timeout_s = 3) {
    std::optional<Change> change =
        changes_.PopFor(milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (!change) return "<nothing>";
    last_report_time_ = change->time;
    return change->contents;
  }

  // Waits until the watcher has read the file `count` times after quiet periods.
  static bool WaitForChecks(const MachineListWatcher& watcher, int64_t count) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(3);
    while (watcher.settled_checks() < count) {
      if (SteadyClock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }

  struct Change {
    std::string contents;
    SteadyClock::time_point time;
  };

  testing::TempDir dir_;
  BlockingQueue<Change> changes_;
  SteadyClock::time_point last_report_time_;
};

TEST_F(MachineListWatcherTest, ReportsAnInPlaceEditWellWithinASecond) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(WatcherOptions{});  // the defaults: debounce 0.2 s, poll 1 s
  EXPECT_TRUE(watcher->using_inotify());

  const auto written = SteadyClock::now();
  WriteFile(ListPath(), "localhost slots=3\n");
  EXPECT_EQ(NextChange(), "localhost slots=3\n");
  const double latency_s = std::chrono::duration<double>(last_report_time_ - written).count();
  std::printf("change reported %.3f s after the write (debounce 0.2 s)\n", latency_s);
  EXPECT_LT(latency_s, 0.6);
}

TEST_F(MachineListWatcherTest, ReportsAWriteAndRenameOverOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  // sed -i: a temporary file in the same directory, renamed over the list.
  WriteFile(dir_.Path("sedAbC123"), "localhost slots=4\n");
  ASSERT_EQ(::rename(dir_.Path("sedAbC123").c_str(), ListPath().c_str()), 0);
  EXPECT_EQ(NextChange(), "localhost slots=4\n");
  EXPECT_EQ(NextChange(0.4), "<nothing>");
}

TEST_F(MachineListWatcherTest, ReportsAVimStyleSaveOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  // vim: a probe file "4913", the old file renamed to a backup, a new file written.
  WriteFile(dir_.Path("4913"), "");
  ASSERT_EQ(::unlink(dir_.Path("4913").c_str()), 0);
  ASSERT_EQ(::rename(ListPath().c_str(), dir_.Path("machines.txt~").c_str()), 0);
  WriteFile(ListPath(), "localhost slots=1\n");
  ASSERT_EQ(::unlink(dir_.Path("machines.txt~").c_str()), 0);
  EXPECT_EQ(NextChange(), "localhost slots=1\n");
  EXPECT_EQ(NextChange(0.4), "<nothing>");
}

TEST_F(MachineListWatcherTest, TruncateThenWriteCountsOnce) {
  WriteFile(ListPath(), "localhost slots=2\n");
  WatcherOptions options;  // debounce 0.2 s: the two steps come well within it
  auto watcher = StartWatcher(options);
  ASSERT_EQ(::truncate(ListPath().c_str(), 0), 0);
  std::this_thread::sleep_for(milliseconds(30));
  {
    std::ofstream out(ListPath(), std::ios::binary | std::ios::app);
    out << "localhost slots=5\n";
  }
  EXPECT_EQ(NextChange(), "localhost slots=5\n");
  EXPECT_EQ(NextChange(0.5), "<nothing>");
}

TEST_F(MachineListWatcherTest, TouchingWithoutChangeReportsNothing) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  ASSERT_EQ(::utimensat(AT_FDCWD, ListPath().c_str(), nullptr, 0), 0);  // touch
  ASSERT_TRUE(WaitForChecks(*watcher, 1)) << "the touch was not noticed";
  // Rewriting the same bytes is no change either.
  WriteFile(ListPath(), "localhost slots=2\n");
  ASSERT_TRUE(WaitForChecks(*watcher, 2)) << "the rewrite was not noticed";
  EXPECT_EQ(NextChange(0), "<nothing>");
}

TEST_F(MachineListWatcherTest, OtherFilesInTheDirectoryAreIgnored) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  WriteFile(dir_.Path("notes.txt"), "hello\n");
  WriteFile(dir_.Path("machines.txt.bak"), "localhost slots=9\n");
  WriteFile(ListPath(), "localhost slots=3\n");
  EXPECT_EQ(NextChange(), "localhost slots=3\n");
  EXPECT_EQ(watcher->settled_checks(), 1);
}

TEST_F(MachineListWatcherTest, ADeletedListIsReportedWhenItReappears) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  ASSERT_EQ(::unlink(ListPath().c_str()), 0);
  ASSERT_TRUE(WaitForChecks(*watcher, 1)) << "the deletion was not noticed";
  EXPECT_EQ(NextChange(0), "<nothing>");
  WriteFile(ListPath(), "localhost slots=6\n");
  EXPECT_EQ(NextChange(), "localhost slots=6\n");
}

TEST_F(MachineListWatcherTest, ARecreatedListWithTheSameContentsIsNoChange) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  ASSERT_EQ(::unlink(ListPath().c_str()), 0);
  ASSERT_TRUE(WaitForChecks(*watcher, 1));
  WriteFile(ListPath(), "localhost slots=2\n");
  ASSERT_TRUE(WaitForChecks(*watcher, 2));
  EXPECT_EQ(NextChange(0), "<nothing>");
}

TEST_F(MachineListWatcherTest, PollingAloneDetectsAChangeWithinThePollInterval) {
  WriteFile(ListPath(), "localhost slots=2\n");
  WatcherOptions options;
  options.use_inotify = false;
  options.poll_interval_s = 0.2;
  options.debounce_s = 0.05;
  auto watcher = StartWatcher(options);
  EXPECT_FALSE(watcher->using_inotify());

  // Seen by stat(): a new size (mtime alone may not move within a coarse timestamp tick).
  const auto written = SteadyClock::now();
  WriteFile(ListPath(), "localhost slots=12\n");
  EXPECT_EQ(NextChange(), "localhost slots=12\n");
  const double latency_s = std::chrono::duration<double>(last_report_time_ - written).count();
  std::printf("polling alone: change reported %.3f s after the write (poll 0.2 s)\n", latency_s);
  EXPECT_LT(latency_s, 0.2 + 0.05 + 0.4);
}

TEST_F(MachineListWatcherTest, ABaselineThatDiffersIsReportedAtStart) {
  WriteFile(ListPath(), "localhost slots=4\n");
  WatcherOptions options = Fast();
  options.baseline = "localhost slots=2\n";  // what the manager parsed before the edit
  auto watcher = StartWatcher(options);
  EXPECT_EQ(NextChange(), "localhost slots=4\n");
}

TEST_F(MachineListWatcherTest, StopIsIdempotentAndEndsReports) {
  WriteFile(ListPath(), "localhost slots=2\n");
  auto watcher = StartWatcher(Fast());
  watcher->Stop();
  watcher->Stop();
  WriteFile(ListPath(), "localhost slots=3\n");
  EXPECT_EQ(NextChange(0.3), "<nothing>");
  EXPECT_FALSE(watcher->Start().ok()) << "a stopped watcher does not start again";
}

}  // namespace
}  // namespace mitra::manager
