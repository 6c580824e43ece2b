// WorkerProcesses (run/worker_processes.h): the run loop's book of worker processes, without
// processes: which is which rank of the running generation, a parked worker kept by a later
// generation and its events routed there, a released one waited for until it exits, and a
// process that exits forgotten everywhere.
#include "run/worker_processes.h"

#include <gtest/gtest.h>

namespace mitra::run {
namespace {

// A process of no runner: the book compares runners by address only.
LiveRank Process(launcher::ProcessId id, int64_t pid) {
  LiveRank live;
  live.runner = reinterpret_cast<launcher::ProcessRunner*>(0x1000);
  live.id = id;
  live.pid = pid;
  return live;
}

WorkerProcesses::Key KeyOf(const LiveRank& live) { return {live.runner, live.id}; }

TEST(WorkerProcesses, RanksBelongToTheRunningGenerationOnly) {
  WorkerProcesses book;
  book.BeginGeneration(3);
  book.Add(0) = Process(7, 700);
  ASSERT_NE(book.Find(3, 0), nullptr);
  EXPECT_EQ(book.Find(3, 0)->pid, 700);
  EXPECT_EQ(book.Find(2, 0), nullptr) << "a rank of an earlier generation";
  EXPECT_EQ(book.Find(3, 1), nullptr);
  book.BeginGeneration(4);
  EXPECT_EQ(book.Find(4, 0), nullptr) << "a new generation starts with no ranks";
  EXPECT_EQ(book.generation(), 4);
}

// A worker parks as rank 1 of generation 3 and is kept as rank 0 of generation 4: its events,
// which it still sends as 3/1, go to 4/0; another process's are left as they are.
TEST(WorkerProcesses, AKeptWorkersEventsGoToItsNewPlace) {
  WorkerProcesses book;
  book.BeginGeneration(3);
  const LiveRank worker = Process(7, 700);
  book.Add(1) = worker;
  book.Parked(1);
  book.BeginGeneration(4);
  std::optional<LiveRank> taken = book.TakeParked({3, 1});
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->pid, 700);
  EXPECT_FALSE(book.TakeParked({3, 1})) << "taken once";
  book.Kept(*taken, {4, 0});
  EXPECT_EQ(book.Route(KeyOf(worker), {3, 1}), (WorkerProcesses::Place{4, 0}));
  EXPECT_EQ(book.Route(KeyOf(Process(8, 800)), {4, 1}), (WorkerProcesses::Place{4, 1}));
  book.Exited(KeyOf(worker));
  EXPECT_EQ(book.Route(KeyOf(worker), {3, 1}), (WorkerProcesses::Place{3, 1}));
}

TEST(WorkerProcesses, AReleasedWorkerIsWaitedForUntilItExits) {
  WorkerProcesses book;
  const LiveRank standby = Process(9, 900);
  book.AddStandby(2, standby);
  std::optional<LiveRank> taken = book.TakeParked({manager::kStandbyGeneration, 2});
  ASSERT_TRUE(taken);
  book.Released(*taken);
  EXPECT_TRUE(book.AnyReleased());
  book.Exited(KeyOf(standby));
  EXPECT_FALSE(book.AnyReleased());
}

// A parked worker that exits is gone: nothing can keep it; a rank whose start failed (no
// runner) never parks.
TEST(WorkerProcesses, AWorkerGoneWhileParkedCannotBeKept) {
  WorkerProcesses book;
  book.BeginGeneration(1);
  const LiveRank worker = Process(5, 500);
  book.Add(0) = worker;
  book.Parked(0);
  book.Exited(KeyOf(worker));
  EXPECT_FALSE(book.TakeParked({1, 0}));
  book.Add(1);  // its start failed: no runner
  book.Parked(1);
  EXPECT_FALSE(book.TakeParked({1, 1}));
}

}  // namespace
}  // namespace mitra::run
