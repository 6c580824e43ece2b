// The books of standby and parked workers (standby.h), driven by hand: starting, spares, the
// warm-up of a grow, and the ranks a launch gives parked workers. No clock, no process.
#include "manager/standby.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "planner/grid.h"
#include "tests/manager/machine_lists.h"

namespace mitra::manager {
namespace {

using testing::List;

std::vector<int> Ids(const std::vector<StartStandbyAction>& started) {
  std::vector<int> ids;
  for (const StartStandbyAction& s : started) ids.push_back(s.id);
  return ids;
}

// The 1 x world grid on `machines`, each machine's slots filled in order.
planner::GridPlan Grid(const MachineList& machines, int world) {
  planner::GridRequest request;
  for (const Machine& m : machines.machines) request.slots_per_machine.push_back(m.slots);
  request.stages = 1;
  request.segments = 1;
  request.global_batch = 16;
  request.replicas = world;
  Result<planner::GridPlan> plan = planner::PlanGrid(request);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : planner::GridPlan{};
}

TEST(StandbyWorkers, SparesAreToppedUpPerMachineCountingThoseStillStarting) {
  const MachineList list = List("a slots=2\nb slots=1\n");
  const planner::GridPlan plan = Grid(list, 3);
  StandbyWorkers standby(/*spares=*/2);
  const std::vector<StartStandbyAction> first = standby.KeepSpares(list.machines, plan);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(Ids(first), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(first[0].machine.Address(), "a");
  EXPECT_EQ(first[0].local_rank, -1);
  EXPECT_EQ(standby.SparesOn("a"), 2);
  EXPECT_TRUE(standby.KeepSpares(list.machines, plan).empty()) << "starting ones count";

  // One parks, one dies while loading: only the dead one is replaced.
  std::optional<ParkedWorker> parked = standby.TakeStarting(0);
  ASSERT_TRUE(parked);
  standby.Park(*parked);
  EXPECT_TRUE(standby.TakeStarting(1));
  const std::vector<StartStandbyAction> again = standby.KeepSpares(list.machines, plan);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].machine.Address(), "a");
  EXPECT_EQ(again[0].id, 4) << "ids are never reused";
  EXPECT_FALSE(standby.TakeStarting(1)) << "taken already";
}

// A spare builds a stage of the running grid while it waits; a machine's spares spread over the
// stages, with the grid's partition.
TEST(StandbyWorkers, SparesAreMeantForTheStagesOfTheRunningGridInTurn) {
  const MachineList list = List("a slots=4\nb slots=4\n");
  planner::GridPlan plan = Grid(list, 4);
  plan.stages = 2;
  plan.partition = "3,5";
  StandbyWorkers standby(/*spares=*/3);
  const std::vector<StartStandbyAction> started = standby.KeepSpares(list.machines, plan);
  ASSERT_EQ(started.size(), 6u);
  std::vector<std::string> hints;
  for (const StartStandbyAction& s : started) {
    ASSERT_TRUE(s.stage) << s.id;
    hints.push_back(s.machine.Address() + ":" + s.stage->ToString());
  }
  EXPECT_EQ(hints, (std::vector<std::string>{"a:0/2/3,5", "a:1/2/3,5", "a:0/2/3,5", "b:0/2/3,5",
                                             "b:1/2/3,5", "b:0/2/3,5"}));

  // a's spare of stage 1 parks and a launch takes it: its replacement builds stage 1 again.
  std::optional<ParkedWorker> parked = standby.TakeStarting(started[1].id);
  ASSERT_TRUE(parked);
  standby.Park(*parked);
  EXPECT_EQ(standby.KeepSpares(list.machines, plan).size(), 0u);
  std::vector<ParkedWorker> released;
  planner::GridPlan one_rank = Grid(List("a slots=1\n"), 1);
  const std::map<int, ParkedWorker> taken =
      standby.TakeFor(one_rank, List("a slots=1\n").machines, &released);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken.begin()->second.rank, started[1].id);
  const std::vector<StartStandbyAction> again = standby.KeepSpares(list.machines, plan);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_TRUE(again[0].stage);
  EXPECT_EQ(again[0].stage->ToString(), "1/2/3,5");
}

TEST(StandbyWorkers, ALaunchGivesParkedWorkersTheRanksOnTheirMachinesAndKeepsSpares) {
  const MachineList list = List("a slots=2\nb slots=2\n");
  StandbyWorkers standby(/*spares=*/1);
  standby.Park(ParkedWorker{3, 0, "a", 0});
  standby.Park(ParkedWorker{3, 1, "a", 1});
  standby.Park(ParkedWorker{3, 2, "c", 0});  // a machine the new plan does not use
  standby.Park(ParkedWorker{kStandbyGeneration, 7, "b", -1});
  standby.Park(ParkedWorker{kStandbyGeneration, 8, "b", -1});

  std::vector<ParkedWorker> released;
  const std::map<int, ParkedWorker> kept = standby.TakeFor(Grid(list, 3), list.machines, &released);
  // Ranks 0 and 1 on a keep its workers (same local rank); rank 2 on b takes a standby one.
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.at(0).rank, 0);
  EXPECT_EQ(kept.at(1).rank, 1);
  EXPECT_EQ(kept.at(2).machine, "b");
  // The worker on c has no place; b's other standby worker stays as its spare.
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].machine, "c");
  EXPECT_EQ(standby.SparesOn("b"), 1);
  EXPECT_EQ(standby.TakeAll().size(), 1u);
  EXPECT_EQ(standby.SparesOn("b"), 0);
}

TEST(StandbyWorkers, AWarmUpEndsWhenEveryWorkerArrivedAndReleasesTheLateOnes) {
  const MachineList list = List("a slots=2\nb slots=2\n");
  StandbyWorkers standby(/*spares=*/0);
  const int on_a = standby.Start(list.machines[0], 1).id;
  const int on_b = standby.Start(list.machines[1], 0).id;
  standby.BeginWarmUp("machine list changed: added b", {on_a, on_b});
  EXPECT_TRUE(standby.warming_up());
  standby.SetWarmUpReason("machine list changed: added b; a 1 -> 2 slots");

  std::optional<ParkedWorker> parked = standby.TakeStarting(on_a);
  ASSERT_TRUE(parked);
  standby.Park(*parked);
  EXPECT_TRUE(standby.Arrived(on_a));
  EXPECT_FALSE(standby.Arrived(on_a)) << "once";
  EXPECT_FALSE(standby.WarmUpComplete());

  // Its time runs out before b's worker parks: the morph goes on, b's worker is let go.
  std::optional<StandbyWorkers::EndedWarmUp> ended = standby.EndWarmUp();
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->why, "machine list changed: added b; a 1 -> 2 slots");
  ASSERT_EQ(ended->late.size(), 1u);
  EXPECT_EQ(ended->late[0].rank, on_b);
  EXPECT_FALSE(standby.warming_up());
  EXPECT_FALSE(standby.TakeStarting(on_b)) << "let go: no longer starting";
  EXPECT_FALSE(standby.EndWarmUp());
  EXPECT_EQ(standby.TakeAll().size(), 1u) << "a's worker stays parked for the launch";
}

TEST(StandbyWorkers, AWorkerThatArrivesAfterAMorphBeganIsNoLongerAwaited) {
  const MachineList list = List("a slots=2\n");
  StandbyWorkers standby(/*spares=*/0);
  const int id = standby.Start(list.machines[0], 1).id;
  standby.BeginWarmUp("grow", {id});
  standby.DropWarmUp();  // a shrink began the morph at once
  EXPECT_FALSE(standby.warming_up());
  EXPECT_TRUE(standby.TakeStarting(id)) << "still starting: kept if it parks before the launch";
  EXPECT_FALSE(standby.Arrived(id));
}

}  // namespace
}  // namespace mitra::manager
