// Regrouping in place, as the controller decides it: a morph asks ranks that can park to park
// (SIGURG, holding their state in memory, when the workers the next launch keeps hold every
// stage; SIGUSR2, after a checkpoint, when not), the next generation keeps the parked workers on
// the machines it uses, resumes from the step they hold and lets the rest go, a user's stop never
// parks anyone, and a generation whose kept workers fail before their first step is followed by
// a full restart.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/manager/controller_fixture.h"
#include "tests/manager/machine_lists.h"

namespace mitra::manager {
namespace {

using testing::List;

class ControllerRegroupTest : public ControllerTest {
 protected:
  // Like RunGeneration, with every rank saying it can park.
  void RunParkingGeneration(int64_t step) {
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    for (int r = 0; r < world; ++r) Feed(RankStarted{g, r, 100 + r});
    for (int r = 0; r < world; ++r) {
      RankReport ready{g, r, RankReport::Kind::kReady, 0};
      ready.can_park = true;
      Feed(ready);
      Feed(RankReport{g, r, RankReport::Kind::kHeartbeat, 0});
    }
    Feed(RankReport{g, 0, RankReport::Kind::kStep, step});
  }
  // Every rank of the current generation reports `stopped` at `step`, then parks (holding its
  // stage's segments of `step` when `holding`); the actions of the last report are kept in last_.
  void ParkAll(int64_t step, bool holding = false) {
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    for (int r = 0; r < world; ++r) Feed(RankReport{g, r, RankReport::Kind::kStopped, step});
    for (int r = 0; r < world; ++r) Park(r, holding ? step : -1);
  }
  // Rank `rank` of the current generation parks, holding its stage's segments (of the fixture's
  // 4, two per stage) as after `held_step` steps (-1: nothing).
  void Park(int rank, int64_t held_step) {
    RankReport parked{controller_->generation(), rank, RankReport::Kind::kParked, held_step};
    if (held_step >= 0) {
      const int stage = controller_->plan().stage_map.PositionOf(rank).stage;
      parked.held = HeldSegments{held_step, 2 * stage, 2 * stage + 2};
    }
    Feed(parked);
  }
  static std::vector<int> Ranks(const std::vector<ParkedWorker>& workers) {
    std::vector<int> out;
    for (const ParkedWorker& w : workers) out.push_back(w.rank);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<ParkedWorker> Released() const {
    std::vector<ParkedWorker> out;
    for (const ReleaseAction& r : All<ReleaseAction>()) {
      out.insert(out.end(), r.workers.begin(), r.workers.end());
    }
    return out;
  }
};

TEST_F(ControllerRegroupTest, AMorphParksTheRanksAndTheNextGenerationKeepsThemOnItsMachines) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});  // 127.0.0.3 leaves: 2 x 2 -> 2 x 1
  // The ranks on 127.0.0.2 hold both stages: they park holding their state, no checkpoint.
  EXPECT_EQ(SignalsOf(SIGURG), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(SignalsOf(SIGUSR1).empty());
  EXPECT_TRUE(SignalsOf(SIGUSR2).empty());
  ParkAll(6, /*holding=*/true);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.generation, 1);
  EXPECT_EQ(launch.expected_step, 6);
  EXPECT_EQ(launch.held_step, 6);  // the kept workers hold step 6 of every segment
  // The new ranks 0 and 1 run on 127.0.0.2, where ranks 0 and 1 parked, each on its own slot.
  ASSERT_EQ(launch.kept.size(), 2u);
  EXPECT_EQ(launch.kept.at(0).generation, 0);
  EXPECT_EQ(launch.kept.at(0).rank, 0);
  EXPECT_EQ(launch.kept.at(1).rank, 1);
  // The workers of 127.0.0.3 are let go.
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{2, 3}));
  EXPECT_EQ(Released()[0].machine, "127.0.0.3");
}

// A list edit that comes while the kept workers of a morph's launch are still getting ready
// waits for them: asked to stop then, they would have trained nothing and held nothing the
// checkpoint does not, and the job would go back to the newest checkpoint.
TEST_F(ControllerRegroupTest, AChangeWhileTheKeptWorkersGetReadyWaitsAndKeepsTheirState) {
  Feed(StartInput{List("127.0.0.2 slots=4\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});  // 2 x 2 -> 2 x 1
  ParkAll(6, /*holding=*/true);
  ASSERT_EQ(OnlyLaunch().held_step, 6);
  Feed(MachinesChanged{List("127.0.0.2 slots=4\n")});  // back before they are ready
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_TRUE(All<StartStandbyAction>().empty());
  EXPECT_TRUE(Recorded("machines_changed"));
  const int64_t g = controller_->generation();
  RankReport ready{g, 0, RankReport::Kind::kReady, 0};
  ready.can_park = true;
  Feed(ready);
  EXPECT_TRUE(All<StartStandbyAction>().empty()) << "one rank is not ready yet";
  ready.rank = 1;
  Feed(ready);
  // Both ready: the grow goes on as any other, its new workers started first.
  EXPECT_EQ(All<StartStandbyAction>().size(), 2u);
  EXPECT_TRUE(All<SignalAction>().empty());
}

// The same for a shrink: the kept workers, once ready, park holding their state.
TEST_F(ControllerRegroupTest, AShrinkWhileTheKeptWorkersGetReadyParksThemHoldingTheirState) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=4\n")});  // 2 x 1 -> 2 x 2, started first
  for (const StartStandbyAction& s : All<StartStandbyAction>()) {
    Feed(RankReport{kStandbyGeneration, s.id, RankReport::Kind::kParked, -1});
  }
  ASSERT_EQ(SignalsOf(SIGURG).size(), 2u);
  ParkAll(6, /*holding=*/true);
  ASSERT_EQ(OnlyLaunch().held_step, 6);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  EXPECT_TRUE(All<SignalAction>().empty());
  const int64_t g = controller_->generation();
  for (int r = 0; r < 4; ++r) {
    RankReport ready{g, r, RankReport::Kind::kReady, 0};
    ready.can_park = true;
    Feed(ready);
  }
  EXPECT_EQ(SignalsOf(SIGURG), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(SignalsOf(SIGUSR2).empty());
  EXPECT_TRUE(SignalsOf(SIGUSR1).empty());
}

// A rank that stopped for a morph and then falls silent (SIGSTOP, before it parks) is hung after
// the heartbeat timeout, not after the stop timeout: it would park, so it beats until then.
TEST_F(ControllerRegroupTest, ARankSilentAfterItStoppedForAMorphIsHungAtTheHeartbeatTimeout) {
  Feed(StartInput{List("127.0.0.2 slots=4\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  const int64_t g = controller_->generation();
  for (int r = 0; r < 4; ++r) Feed(RankReport{g, r, RankReport::Kind::kStopped, 6});
  for (int r = 1; r < 4; ++r) Park(r, 6);
  Advance(5.5);  // past the heartbeat timeout (5 s), far inside the stop timeout
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
}

TEST_F(ControllerRegroupTest, AGrowStartsItsNewWorkersFirstAndKeepsEveryone) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  // The new ranks' processes start while the job trains on: nobody is signalled yet.
  const auto standby = All<StartStandbyAction>();
  ASSERT_EQ(standby.size(), 2u);
  EXPECT_EQ(standby[0].machine.Address(), "127.0.0.3");
  EXPECT_EQ(standby[0].local_rank, 0);
  EXPECT_EQ(standby[1].local_rank, 1);
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_TRUE(Recorded("warm_up"));
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  AdvanceAlive(3);  // they load
  Feed(RankReport{kStandbyGeneration, standby[0].id, RankReport::Kind::kParked, -1});
  EXPECT_TRUE(All<SignalAction>().empty());
  Feed(RankReport{kStandbyGeneration, standby[1].id, RankReport::Kind::kParked, -1});
  // Both ready: now the morph, which keeps everyone, so their state too.
  EXPECT_EQ(SignalsOf(SIGURG).size(), 2u);
  ParkAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.world_size(), 4);
  ASSERT_EQ(launch.kept.size(), 4u);  // no process starts
  EXPECT_EQ(launch.kept.at(2).generation, kStandbyGeneration);
  EXPECT_EQ(launch.kept.at(3).generation, kStandbyGeneration);
  EXPECT_TRUE(Released().empty());
  // Each was told the stage its place has, to build while it loads.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(standby[i].stage.has_value());
    EXPECT_EQ(standby[i].stage->stages, launch.plan.stages);
    EXPECT_EQ(standby[i].stage->stage, launch.plan.stage_map.PositionOf(2 + i).stage);
    EXPECT_EQ(standby[i].stage->partition, launch.plan.partition);
  }
  // The first step tells how many were kept and started.
  now_ += 0.5;
  RunParkingGeneration(7);
  const auto records = All<RecordAction>();
  const auto first = std::find_if(records.begin(), records.end(),
                                  [](const RecordAction& r) { return r.event == "first_step"; });
  ASSERT_NE(first, records.end());
  EXPECT_EQ(first->fields.GetNumber("kept"), 4);
  EXPECT_EQ(first->fields.GetNumber("started"), 0);
  EXPECT_NE(first->line.find("regroup"), std::string::npos) << first->line;
}

// P = the slots of the job's one machine, 1F1B; 2 stages of 2 segments, or 4 of one.
class OnePipelinePolicy : public ShapePolicy {
 public:
  Result<GridPlan> Plan(const ShapeRequest& request) const override {
    const int slots = request.machines.at(0).slots;
    Result<GridPlan> plan = FixedStagesPolicy(slots).Plan(request);
    if (plan.ok()) {
      plan->schedule = planner::ScheduleKind::k1F1B;
      plan->partition = slots == 2 ? "2,2" : "1,1,1,1";
    }
    return plan;
  }
};

// 2 x 1 -> 4 x 1 on one machine: the worker of segments 2-3 (slot 1) takes the rank of stage 3,
// the heaviest segment, not stage 1's, which it holds nothing of; the standby workers start on
// the other slots, each told the stage its slot's rank will have.
TEST_F(ControllerRegroupTest, AChangeOfPKeepsEachWorkerOnItsSlotAsTheRankThatKeepsTheMost) {
  ControllerOptions options = Options();
  options.policy = std::make_shared<OnePipelinePolicy>();
  options.segment_weights = {1, 1, 1, 5};
  Make(options);
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=4\n")});
  const auto standby = All<StartStandbyAction>();
  ASSERT_EQ(standby.size(), 2u);
  for (const StartStandbyAction& s : standby) {
    Feed(RankReport{kStandbyGeneration, s.id, RankReport::Kind::kParked, -1});
  }
  EXPECT_EQ(SignalsOf(SIGURG), (std::vector<int>{0, 1}));  // they hold every segment between them
  ParkAll(6, /*holding=*/true);
  const LaunchAction& launch = OnlyLaunch();
  ASSERT_EQ(launch.plan.stages, 4);
  std::vector<int> local_ranks;
  for (const planner::RankPlacement& p : launch.plan.ranks) local_ranks.push_back(p.local_rank);
  EXPECT_EQ(local_ranks, (std::vector<int>{0, 3, 2, 1}));
  ASSERT_EQ(launch.kept.size(), 4u);
  EXPECT_EQ(launch.kept.at(0).rank, 0);
  EXPECT_EQ(launch.kept.at(3).generation, 0);
  EXPECT_EQ(launch.kept.at(3).rank, 1);
  EXPECT_EQ(launch.held_step, 6);
  for (const int rank : {1, 2}) {
    const ParkedWorker& w = launch.kept.at(rank);
    EXPECT_EQ(w.generation, kStandbyGeneration);
    EXPECT_EQ(w.local_rank, launch.plan.ranks[rank].local_rank);
    const auto s = std::find_if(standby.begin(), standby.end(),
                                [&](const StartStandbyAction& a) { return a.id == w.rank; });
    ASSERT_NE(s, standby.end());
    ASSERT_TRUE(s->stage.has_value());
    EXPECT_EQ(s->stage->stage, launch.plan.stage_map.PositionOf(rank).stage);
  }
}

TEST_F(ControllerRegroupTest, ANewWorkerThatFailsToStartLeavesTheRunningGenerationUntouched) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  const auto standby = All<StartStandbyAction>();
  ASSERT_EQ(standby.size(), 2u);
  Feed(RankReport{kStandbyGeneration, standby[0].id, RankReport::Kind::kParked, -1});
  // The other dies while it loads: 127.0.0.3 is suspect, the job stays in its shape.
  Feed(RankExited{kStandbyGeneration, standby[1].id, launcher::ExitStatus{1, 0}});
  const auto failed = All<RecordAction>();
  const auto record = std::find_if(failed.begin(), failed.end(),
                                   [](const RecordAction& r) { return r.event == "standby_failed"; });
  ASSERT_NE(record, failed.end());
  EXPECT_NE(record->line.find("the job trains on in its shape"), std::string::npos) << record->line;
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  EXPECT_EQ(controller_->generation(), 0);
  // The one that parked is let go.
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{standby[0].id}));
}

TEST_F(ControllerRegroupTest, AGrowWhoseNewWorkersAreLateMorphsWithoutThem) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  const auto standby = All<StartStandbyAction>();
  ASSERT_EQ(standby.size(), 2u);
  Feed(RankReport{kStandbyGeneration, standby[0].id, RankReport::Kind::kParked, -1});
  AdvanceAlive(ControllerOptions().startup_timeout_s);  // the last second brings the deadline
  EXPECT_EQ(SignalsOf(SIGURG).size(), 2u);
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{standby[1].id}));  // exits when it parks
  ParkAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.world_size(), 4);
  EXPECT_EQ(launch.kept.size(), 3u);  // one rank starts a process
}

TEST_F(ControllerRegroupTest, RanksThatCannotHoldTheirStageCheckpointBeforeAMorph) {
  // As above, but the ranks said `"hold":false` when ready (ZeRO-1: each replica keeps only its
  // share of the optimizer state): parked, they would hold no stage whole.
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  const int64_t g = controller_->generation();
  for (int r = 0; r < 4; ++r) Feed(RankStarted{g, r, 100 + r});
  for (int r = 0; r < 4; ++r) {
    RankReport ready{g, r, RankReport::Kind::kReady, 0};
    ready.can_park = true;
    ready.can_hold = false;
    Feed(ready);
    Feed(RankReport{g, r, RankReport::Kind::kHeartbeat, 0});
  }
  Feed(RankReport{g, 0, RankReport::Kind::kStep, 5});
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  EXPECT_EQ(SignalsOf(SIGUSR2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(SignalsOf(SIGURG).empty());
}

TEST_F(ControllerRegroupTest, AMorphThatKeepsNoHolderOfAStageCheckpointsFirst) {
  // 2 x 1 over two machines; 127.0.0.3 leaves with stage 1's only replica (and too few slots
  // remain: the job waits). Its state must reach storage before it goes.
  Feed(StartInput{List("127.0.0.2 slots=1\n127.0.0.3 slots=1\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});
  EXPECT_EQ(SignalsOf(SIGUSR2), (std::vector<int>{0, 1}));
  EXPECT_TRUE(SignalsOf(SIGURG).empty());
  const auto records = All<RecordAction>();
  const auto morph = std::find_if(records.begin(), records.end(),
                                  [](const RecordAction& r) { return r.event == "morph"; });
  ASSERT_NE(morph, records.end());
  EXPECT_EQ(morph->fields.GetString("state"), "checkpoint");
  EXPECT_NE(morph->line.find("to checkpoint and stop"), std::string::npos) << morph->line;
}

TEST_F(ControllerRegroupTest, TheMorphRecordSaysTheStateStaysInMemory) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  const auto records = All<RecordAction>();
  const auto morph = std::find_if(records.begin(), records.end(),
                                  [](const RecordAction& r) { return r.event == "morph"; });
  ASSERT_NE(morph, records.end());
  EXPECT_EQ(morph->fields.GetString("state"), "memory");
  EXPECT_NE(morph->line.find("keeping their state in memory"), std::string::npos) << morph->line;
}

TEST_F(ControllerRegroupTest, TheLaunchResumesFromTheNewestStepTheKeptWorkersHoldWhole) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  ParkAll(6);  // parked after a checkpoint, holding nothing
  EXPECT_FALSE(OnlyLaunch().held_step.has_value());
}

TEST(WholeHeldStep, IsTheNewestStepEverySegmentIsHeldAt) {
  auto worker = [](int rank, int64_t step, int first, int end) {
    return ParkedWorker{0, rank, "m", rank, HeldSegments{step, first, end}};
  };
  // Two stages of two segments, two replicas each.
  std::map<int, ParkedWorker> all{{0, worker(0, 7, 0, 2)}, {1, worker(1, 7, 2, 4)},
                                  {2, worker(2, 7, 0, 2)}, {3, worker(3, 7, 2, 4)}};
  EXPECT_EQ(WholeHeldStep(all, 4), 7);
  // A failure struck during step 8: one replica of stage 0 passed its all-reduce, nobody of
  // stage 1 did. Step 7 is still whole (replica 1 of stage 0 holds it); step 8 is not.
  std::map<int, ParkedWorker> mixed{{0, worker(0, 8, 0, 2)}, {1, worker(1, 7, 2, 4)},
                                    {2, worker(2, 7, 0, 2)}};
  EXPECT_EQ(WholeHeldStep(mixed, 4), 7);
  // Stage 0's only holder of step 7 is gone: no step is whole.
  mixed.erase(2);
  EXPECT_EQ(WholeHeldStep(mixed, 4), std::nullopt);
  // A stage with no holder at all, and workers that hold nothing.
  EXPECT_EQ(WholeHeldStep({{0, worker(0, 7, 0, 2)}}, 4), std::nullopt);
  EXPECT_EQ(WholeHeldStep({{0, ParkedWorker{0, 0, "m", 0}}}, 4), std::nullopt);
  // A change of P: three stages' holders cover the four segments between them.
  std::map<int, ParkedWorker> three{{0, worker(0, 5, 0, 1)}, {1, worker(1, 5, 1, 3)},
                                    {2, worker(2, 5, 3, 4)}};
  EXPECT_EQ(WholeHeldStep(three, 4), 5);
}

TEST_F(ControllerRegroupTest, AParkedWorkerKeepsItsSlotOnAMachine) {
  // Two ranks parked on one machine, its slot order matters for GPUs: local rank 1 stays 1.
  ParkedWorkers parked;
  parked.Add(ParkedWorker{4, 7, "127.0.0.2", 1});
  parked.Add(ParkedWorker{4, 3, "127.0.0.2", 0});
  planner::GridPlan plan;
  plan.stages = 2;
  plan.replicas = 1;
  plan.ranks = {{0, 0, 0, 0, 0}, {1, 0, 1, 1, 0}};
  std::vector<ParkedWorker> left;
  Machine machine;
  machine.host = "127.0.0.2";
  machine.slots = 2;
  const auto kept = parked.TakeFor(plan, {machine}, &left);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.at(0).rank, 3);
  EXPECT_EQ(kept.at(1).rank, 7);
  EXPECT_TRUE(left.empty());
  EXPECT_TRUE(parked.empty());
}

TEST_F(ControllerRegroupTest, RanksThatCannotParkAreAskedToStopWithSigusr1) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(5);  // ready without saying they can park
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 4u);
  EXPECT_TRUE(SignalsOf(SIGUSR2).empty());
}

TEST_F(ControllerRegroupTest, AStopNeverParksAndLetsGoOfWorkersParkedByAMorph) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(StopInput{"SIGINT", true});
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 2u);
  EXPECT_TRUE(SignalsOf(SIGUSR2).empty());

  // A stop asked while a morph's ranks park: the parked workers are let go at the end.
  Make(Options());
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  Feed(StopInput{"SIGINT", true});
  ParkAll(6);
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kStopped);
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(All<LaunchAction>().empty());
}

TEST_F(ControllerRegroupTest, AKeptWorkerThatFailsBeforeTheFirstStepMakesTheNextStartAfresh) {
  Feed(StartInput{List("127.0.0.2 slots=4\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  ParkAll(6);
  ASSERT_EQ(OnlyLaunch().kept.size(), 2u);
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{2, 3}));
  const int64_t g = controller_->generation();
  Feed(RankStarted{g, 0, 100});
  Feed(RankStarted{g, 1, 101});
  // Rank 1 dies while the kept workers rendezvous: a recovery, said to be a failed regroup.
  Feed(RankExited{g, 1, launcher::ExitStatus{0, SIGKILL}});
  const auto failures = All<RecordAction>();
  const auto failure = std::find_if(failures.begin(), failures.end(),
                                    [](const RecordAction& r) { return r.event == "failure"; });
  ASSERT_NE(failure, failures.end());
  EXPECT_TRUE(failure->fields.Find("during_regroup") != nullptr);
  EXPECT_NE(failure->line.find("every worker starts afresh"), std::string::npos);
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0}));
  Feed(RankExited{g, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"127.0.0.2", true, ""});  // the failed machine is healthy: relaunched
  const LaunchAction& relaunch = OnlyLaunch();
  EXPECT_EQ(relaunch.generation, g + 1);
  EXPECT_TRUE(relaunch.kept.empty());
}

TEST_F(ControllerRegroupTest, WaitingForMachinesLetsTheParkedWorkersGo) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});  // fewer slots than stages
  ParkAll(6);
  EXPECT_EQ(controller_->phase(), Phase::kWaiting);
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(All<LaunchAction>().empty());
}

}  // namespace
}  // namespace mitra::manager

namespace mitra::manager {
namespace {

using testing::List;

class ControllerRecoveryParkTest : public ControllerRegroupTest {};

TEST_F(ControllerRecoveryParkTest, SurvivorsOfAFailureParkAndTheRelaunchKeepsThem) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(RankExited{0, 3, launcher::ExitStatus{0, SIGKILL}});
  // No SIGKILL for the survivors: they give up the step in flight (SIGALRM) and park.
  EXPECT_TRUE(SignalsOf(SIGKILL).empty());
  EXPECT_EQ(SignalsOf(SIGALRM), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  for (int r = 0; r < 3; ++r) Feed(RankReport{0, r, RankReport::Kind::kParked, -1});
  Feed(HostChecked{"127.0.0.3", true, ""});
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.world_size(), 4);
  ASSERT_EQ(launch.kept.size(), 3u);  // rank 3's place starts a process
  EXPECT_EQ(launch.kept.count(3), 0u);
}

TEST_F(ControllerRecoveryParkTest, TheRelaunchAfterAFailureResumesFromTheStepTheSurvivorsHold) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(RankExited{0, 3, launcher::ExitStatus{0, SIGKILL}});
  // The failure struck during step 9: one survivor had passed the step's all-reduce.
  Park(0, 9);
  Park(1, 8);
  Park(2, 8);
  Feed(HostChecked{"127.0.0.3", true, ""});
  const LaunchAction& launch = OnlyLaunch();
  ASSERT_EQ(launch.kept.size(), 3u);
  EXPECT_EQ(launch.held_step, 8);  // the newest step held whole: step 9 is not
}

TEST_F(ControllerRecoveryParkTest, SurvivorsThatHoldNoStepWholeResumeFromTheCheckpointAndSaySo) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(RankExited{0, 3, launcher::ExitStatus{0, SIGKILL}});
  // Stage 1's survivor passed step 9's all-reduce, stage 0's did not and one of them is gone:
  // no step is held for every segment.
  Park(0, 8);
  Park(1, 9);
  Feed(RankExited{0, 2, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"127.0.0.3", true, ""});
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_FALSE(launch.held_step.has_value());
  Feed(GenerationLaunched{1, {100, 101, 102, 103}, {0, 1}, 0, "127.0.0.2:1", 0.1});
  const auto records = All<RecordAction>();
  const auto told = std::find_if(records.begin(), records.end(),
                                 [](const RecordAction& r) { return r.event == "launch"; });
  ASSERT_NE(told, records.end());
  EXPECT_NE(told->line.find("do not hold every stage's state of one step"), std::string::npos)
      << told->line;
  EXPECT_EQ(told->fields.Find("held_step"), nullptr);
}

TEST_F(ControllerRecoveryParkTest, ARankThatParksUnaskedIsAFailureNotTheEndOfTheJob) {
  // Its rendezvous or a message failed before the manager saw why: every rank parking so is no
  // reason to finish as done.
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Park(0, 5);
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  Park(1, 5);
  EXPECT_TRUE(All<FinishAction>().empty());
  EXPECT_EQ(OnlyLaunch().held_step, 5);  // and the relaunch keeps both, from their state
}

TEST_F(ControllerRecoveryParkTest, SurvivorsThatDoNotParkInTimeAreKilled) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  EXPECT_TRUE(SignalsOf(SIGKILL).empty());
  Advance(ControllerOptions().park_grace_s);
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0}));
}

TEST_F(ControllerRecoveryParkTest, SurvivorsOfALongStepGetOneAndAHalfStepsToPark) {
  // A survivor notices the failure at its next message, which a long micro-batch delays.
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  RankReport step{0, 0, RankReport::Kind::kStep, 6};
  step.seconds = 4;
  Feed(step);
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  AdvanceAlive(5.5);
  EXPECT_TRUE(SignalsOf(SIGKILL).empty());
  Advance(0.6);
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0}));
}

TEST_F(ControllerRecoveryParkTest, AHungRankIsKilledAtOnceAndItsPeersMayPark) {
  Make(Options());
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunParkingGeneration(5);
  AdvanceAlive(2);
  Feed(RankReport{0, 0, RankReport::Kind::kHeartbeat, 0});  // rank 1 goes silent
  Advance(ControllerOptions().heartbeat_timeout_s - 0.5);     // it is; rank 0 is not
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{1}));
  EXPECT_EQ(SignalsOf(SIGALRM), (std::vector<int>{0}));  // the survivor gives up its step
}

TEST_F(ControllerRecoveryParkTest, AfterALostMachineEveryoneIsKilledAtOnce) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  launcher::ExitStatus lost;
  lost.lost = true;
  lost.exit_code = -1;
  Feed(RankExited{0, 3, lost});
  // Its peers may not notice a frozen machine for long: no grace.
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0, 1, 2}));
}

TEST_F(ControllerRecoveryParkTest, SparesStartAtTheFirstStepTakeAFailedRanksPlaceAndAreReplaced) {
  ControllerOptions options = Options();
  options.spares = 1;
  Make(options);
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  EXPECT_TRUE(All<StartStandbyAction>().empty()) << "not while the job's workers start";
  RunParkingGeneration(5);
  const auto spares = All<StartStandbyAction>();  // with the first step
  ASSERT_EQ(spares.size(), 1u);
  EXPECT_EQ(spares[0].machine.Address(), "127.0.0.2");
  // It builds a stage of the running grid while it waits (the first: the machine has no other).
  ASSERT_TRUE(spares[0].stage.has_value());
  EXPECT_EQ(spares[0].stage->stage, 0);
  EXPECT_EQ(spares[0].stage->stages, 2);
  Feed(RankReport{kStandbyGeneration, spares[0].id, RankReport::Kind::kParked, -1});
  EXPECT_TRUE(All<ReleaseAction>().empty()) << "a spare is kept";
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(RankReport{0, 0, RankReport::Kind::kParked, -1});
  Feed(HostChecked{"127.0.0.2", true, ""});
  const LaunchAction& launch = OnlyLaunch();
  ASSERT_EQ(launch.kept.size(), 2u);
  EXPECT_EQ(launch.kept.at(0).generation, 0);  // the survivor keeps its place
  EXPECT_EQ(launch.kept.at(1).generation, kStandbyGeneration);
  // The spare that was used is replaced, once the healed generation has trained a step.
  EXPECT_TRUE(All<StartStandbyAction>().empty());
  Feed(RankReport{controller_->generation(), 0, RankReport::Kind::kStep, 6});
  ASSERT_EQ(All<StartStandbyAction>().size(), 1u);
  EXPECT_NE(All<StartStandbyAction>()[0].id, spares[0].id);
}

TEST_F(ControllerRecoveryParkTest, SparesOutliveAMorphThatDoesNotNeedThem) {
  ControllerOptions options = Options();
  options.spares = 1;
  Make(options);
  Feed(StartInput{List("127.0.0.2 slots=4\n"), {}});
  RunParkingGeneration(5);
  const int spare = All<StartStandbyAction>().at(0).id;
  Feed(RankReport{kStandbyGeneration, spare, RankReport::Kind::kParked, -1});
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  ParkAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.kept.size(), 2u);
  for (const auto& [rank, worker] : launch.kept) EXPECT_EQ(worker.generation, 0);
  EXPECT_EQ(Ranks(Released()), (std::vector<int>{2, 3}));  // not the spare
  EXPECT_TRUE(All<StartStandbyAction>().empty());
}

}  // namespace
}  // namespace mitra::manager

namespace mitra::manager {
namespace {

TEST_F(ControllerRegroupTest, ARankThatParksAfterItWasKilledIsNotKept) {
  Feed(StartInput{testing::List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunParkingGeneration(5);
  launcher::ExitStatus lost;
  lost.lost = true;
  lost.exit_code = -1;
  Feed(RankExited{0, 3, lost});
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0, 1, 2}));
  Feed(RankExited{0, 2, lost});
  // Their peer failing, ranks 0 and 1 park before the SIGKILL lands: they are not kept.
  Feed(RankReport{0, 0, RankReport::Kind::kParked, -1});
  Feed(RankReport{0, 1, RankReport::Kind::kParked, -1});
  EXPECT_TRUE(All<LaunchAction>().empty());
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.world_size(), 2);
  EXPECT_TRUE(launch.kept.empty());
}

}  // namespace
}  // namespace mitra::manager
