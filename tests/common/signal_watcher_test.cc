#include "common/signal_watcher.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/blocking_queue.h"

namespace mitra {
namespace {

TEST(SignalWatcher, TurnsASignalIntoACallOnItsThread) {
  BlockingQueue<int> seen;
  Result<std::unique_ptr<SignalWatcher>> watcher =
      SignalWatcher::Start({SIGUSR2}, [&seen](int s) { seen.Push(s); });
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  ASSERT_EQ(::raise(SIGUSR2), 0);
  EXPECT_EQ(seen.PopFor(std::chrono::seconds(5)), SIGUSR2);
}

TEST(SignalWatcher, OnlyOneAtATimeAndHandlersAreRestored) {
  struct sigaction before {};
  ::sigaction(SIGUSR2, nullptr, &before);
  {
    Result<std::unique_ptr<SignalWatcher>> first = SignalWatcher::Start({SIGUSR2}, [](int) {});
    ASSERT_TRUE(first.ok());
    Result<std::unique_ptr<SignalWatcher>> second = SignalWatcher::Start({SIGUSR2}, [](int) {});
    EXPECT_FALSE(second.ok());
  }
  struct sigaction after {};
  ::sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

TEST(SignalWatcher, NamesSignals) {
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(200), "signal 200");
}

}  // namespace
}  // namespace mitra
