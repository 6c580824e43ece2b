// MachineListWatcher on its own thread, with the real clock: an edit is seen without anyone
// calling Tick(), and Stop ends the reports. No latency is asserted (the debounce is checked on
// a ManualClock in machine_list_watcher_test.cc); the timeouts only bound a broken watcher.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>

#include "common/blocking_queue.h"
#include "run/machine_list_watcher.h"
#include "tests/common/run_helpers.h"

namespace mitra::run {
namespace {

using std::chrono::milliseconds;

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

TEST(MachineListWatcherThread, AnEditIsEventuallyReported) {
  testing::TempDir dir;
  const std::string list = dir.Write("machines.txt", "localhost slots=2\n");
  BlockingQueue<std::string> changes;
  MachineListWatcher watcher(list, WatcherOptions{},
                             [&](const std::string& contents) { changes.Push(contents); });
  ASSERT_TRUE(watcher.Start().ok());
  EXPECT_TRUE(watcher.using_inotify());
  WriteFile(list, "localhost slots=3\n");
  EXPECT_EQ(changes.PopFor(milliseconds(30000)), std::optional<std::string>("localhost slots=3\n"));
}

TEST(MachineListWatcherThread, StopIsIdempotentAndEndsReports) {
  testing::TempDir dir;
  const std::string list = dir.Write("machines.txt", "localhost slots=2\n");
  BlockingQueue<std::string> changes;
  MachineListWatcher watcher(list, WatcherOptions{},
                             [&](const std::string& contents) { changes.Push(contents); });
  ASSERT_TRUE(watcher.Start().ok());
  watcher.Stop();
  watcher.Stop();
  WriteFile(list, "localhost slots=3\n");
  EXPECT_EQ(changes.PopFor(milliseconds(500)), std::nullopt);
  EXPECT_FALSE(watcher.Start().ok()) << "a stopped watcher does not start again";
}

}  // namespace
}  // namespace mitra::run
