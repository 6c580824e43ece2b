// The elastic manager's state machine, driven by hand: no processes, no clock, no sleeps.
#include "manager/controller.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "manager/profile_check.h"
#include "records/records.h"
#include "tests/manager/controller_fixture.h"
#include "tests/manager/machine_lists.h"

namespace mitra::manager {
namespace {

using testing::List;

TEST_F(ControllerTest, LaunchesOnEverySlotAndFinishesWhenEveryRankExitsCleanly) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.generation, 0);
  EXPECT_EQ(launch.plan.stages, 2);
  EXPECT_EQ(launch.plan.replicas, 2);
  EXPECT_FALSE(launch.expected_step.has_value());
  EXPECT_EQ(Addresses(launch),
            (std::vector<std::string>{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"}));
  RunGeneration(1);
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  for (int r = 0; r < 4; ++r) Feed(RankExited{0, r, launcher::ExitStatus{0, 0}});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kDone);
  EXPECT_TRUE(controller_->finished());
}

TEST_F(ControllerTest, WaitsWhenFewerSlotsThanStagesAndLaunchesWhenAMachineArrives) {
  Feed(StartInput{List("127.0.0.2 slots=1\n"), {}});
  EXPECT_TRUE(All<LaunchAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kWaiting);
  EXPECT_NE(controller_->reason().find("2 stages need 2 slots"), std::string::npos)
      << controller_->reason();
  EXPECT_TRUE(Recorded("waiting"));
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n127.0.0.3 slots=1\n")});
  EXPECT_TRUE(All<LaunchAction>().empty());
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_EQ(OnlyLaunch().plan.world_size(), 2);
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
}

TEST_F(ControllerTest, ShrinksWhenHostRemovedFromList) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  EXPECT_EQ(controller_->phase(), Phase::kMorphing);
  EXPECT_EQ(SignalsOf(SIGUSR1), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(All<LaunchAction>().empty());
  StopAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.generation, 1);
  EXPECT_EQ(launch.plan.replicas, 1);
  EXPECT_EQ(launch.expected_step, 6);
  EXPECT_EQ(Addresses(launch), (std::vector<std::string>{"127.0.0.2", "127.0.0.2"}));
  now_ += 2;
  RunGeneration(7);
  EXPECT_TRUE(Recorded("first_step"));
}

// RunLoop's report on a launch is told as the `launch` record and its terminal line.
TEST_F(ControllerTest, ALaunchCarriedOutIsToldWithWhatWasStartedAndKept) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  Feed(GenerationLaunched{0, {4242, 4243}, {1}, 6, "127.0.0.2:29400", 0.25});
  const std::vector<RecordAction> records = All<RecordAction>();
  ASSERT_EQ(records.size(), 1u);
  ASSERT_EQ(records[0].event, records::Launch::kEvent);
  const auto launched = records::FromJson<records::Launch>(records[0].fields);
  EXPECT_EQ(launched.shape.generation, 0);
  EXPECT_EQ(launched.resume_step, 6);
  EXPECT_EQ(launched.rdzv, "127.0.0.2:29400");
  EXPECT_EQ(launched.pids, (std::vector<int64_t>{4242, 4243}));
  EXPECT_EQ(launched.kept, (std::vector<int64_t>{1}));
  EXPECT_FALSE(records[0].error);
  EXPECT_NE(records[0].line.find("launched 1 worker and kept 1 parked worker"), std::string::npos)
      << records[0].line;
  // A report of an earlier generation is ignored.
  Feed(GenerationLaunched{-1, {1}, {}, 0, "", 0});
  EXPECT_TRUE(All<RecordAction>().empty());
}

TEST_F(ControllerTest, ALaunchThatStartedNothingIsToldAsAnError) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  Feed(GenerationLaunched{0, {0, 0}, {}, 0, "127.0.0.2:0", 0});
  ASSERT_EQ(All<RecordAction>().size(), 1u);
  EXPECT_TRUE(All<RecordAction>()[0].error);
  EXPECT_NE(All<RecordAction>()[0].line.find("no worker could be started"), std::string::npos);
}

TEST_F(ControllerTest, AMorphResumingFromAnOlderCheckpointThanItsStopTellsTheLostStep) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  Feed(GenerationLaunched{0, {100, 101, 102, 103}, {}, 0, "127.0.0.2:1", 0});
  EXPECT_FALSE(Recorded("step_lost")) << "a first launch expects no step";
  RunGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  StopAll(6);
  ASSERT_EQ(OnlyLaunch().expected_step, 6);
  Feed(GenerationLaunched{1, {200, 201}, {}, 4, "127.0.0.2:2", 0});
  EXPECT_TRUE(Recorded("launch"));
  ASSERT_TRUE(Recorded("step_lost"));
  for (const RecordAction& r : All<RecordAction>()) {
    if (r.event != "step_lost") continue;
    EXPECT_EQ(r.fields.GetNumber("expected_step"), 6);
    EXPECT_EQ(r.fields.GetNumber("resume_step"), 4);
    EXPECT_TRUE(r.error);
  }
}

TEST_F(ControllerTest, DrainingAMachineInUseMorphsOffItWithoutAFailure) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(5);
  Feed(DrainMachine{"127.0.0.3", "mitra drain"});
  EXPECT_TRUE(Recorded("drain"));
  EXPECT_EQ(controller_->phase(), Phase::kMorphing);
  EXPECT_EQ(SignalsOf(SIGUSR1), (std::vector<int>{0, 1, 2, 3}));
  StopAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.expected_step, 6);
  EXPECT_EQ(Addresses(launch), (std::vector<std::string>{"127.0.0.2", "127.0.0.2"}));
  RunGeneration(7);
  // Draining again says nothing new; the drained machine's loss later is no failure either.
  Feed(DrainMachine{"127.0.0.3", "mitra drain"});
  EXPECT_TRUE(last_.empty());
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});  // the line is unchanged
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  EXPECT_TRUE(All<LaunchAction>().empty());
  for (const MachineView& v : controller_->Machines()) {
    if (v.machine.Address() == "127.0.0.3") {
      EXPECT_EQ(v.state, MachineState::kDrained);
    }
  }
  // Its line changes: it is back, and the job grows onto it again.
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=3\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_EQ(controller_->phase(), Phase::kMorphing);
}

TEST_F(ControllerTest, DrainingAnIdleOrUnknownMachineOnlySaysSo) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunGeneration(1);
  // An extra slot that changes no shape: .3 joins the pool but runs nothing.
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=1\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  ASSERT_EQ(controller_->phase(), Phase::kRunning);
  Feed(DrainMachine{"127.0.0.3", "preemption notice"});
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  ASSERT_EQ(All<RecordAction>().size(), 1u);
  EXPECT_EQ(All<RecordAction>()[0].fields.GetString("action"), "none");
  Feed(DrainMachine{"10.9.9.9", "mitra drain"});
  EXPECT_TRUE(Recorded("drain_refused"));
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
}

TEST_F(ControllerTest, TheFirstStepRecordSplitsEachMorphsDowntime) {
  Feed(StartInput{List("localhost slots=4\n"), {}});
  RunGeneration(1);
  for (const char* list : {"localhost slots=2\n", "localhost slots=4\n"}) {
    Feed(MachinesChanged{List(list)});
    now_ += 1.5;  // the ranks checkpoint and exit
    StopAll(2);   // the next generation starts at the same instant
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    now_ += 1.25;  // start-up and rendezvous
    for (int r = 0; r < world; ++r) {
      Feed(RankStarted{g, r, 100 + r});
      Feed(RankReport{g, r, RankReport::Kind::kReady, 0});
    }
    RankReport restored{g, 0, RankReport::Kind::kRestored, 2};
    restored.seconds = 0.25;
    Feed(restored);
    now_ += 0.75;  // the restore, then the first step
    Feed(RankReport{g, 0, RankReport::Kind::kStep, 3});
    const auto records = All<RecordAction>();
    const auto first = std::find_if(records.begin(), records.end(),
                                    [](const RecordAction& r) { return r.event == "first_step"; });
    ASSERT_NE(first, records.end()) << list;
    EXPECT_EQ(first->fields.GetNumber("stop_s"), 1.5) << list;
    EXPECT_EQ(first->fields.GetNumber("relaunch_s"), 0) << list;
    EXPECT_EQ(first->fields.GetNumber("ready_s"), 1.25) << list;
    EXPECT_EQ(first->fields.GetNumber("load_s"), 0.25) << list;
    EXPECT_EQ(first->fields.GetNumber("first_step_s"), 0.5) << list;
    EXPECT_EQ(first->fields.GetNumber("downtime_s"), 3.5) << list;
    EXPECT_EQ(first->fields.GetNumber("kept"), 0) << list;
    EXPECT_EQ(first->fields.GetNumber("started"), world) << list;
  }
}

TEST_F(ControllerTest, GrowsWhenHostAddedToList) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunGeneration(1);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  // A new machine joins once it has passed a health check.
  ASSERT_EQ(All<CheckHostAction>().size(), 1u);
  EXPECT_TRUE(All<SignalAction>().empty());
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 2u);
  StopAll(2);
  EXPECT_EQ(OnlyLaunch().plan.replicas, 2);
}

TEST_F(ControllerTest, AnAddedMachineThatFailsItsHealthCheckDisturbsNothing) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunGeneration(1);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  Feed(HostChecked{"127.0.0.3", false, "host key changed"});
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_TRUE(Recorded("host_failed"));
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  EXPECT_EQ(controller_->Machines()[1].state, MachineState::kFailed);
}

TEST_F(ControllerTest, AFailureDuringAMorphTurnsItIntoARecovery) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(5);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  ASSERT_EQ(controller_->phase(), Phase::kMorphing);
  Feed(RankReport{0, 0, RankReport::Kind::kStopped, 6});
  Feed(RankExited{0, 1, launcher::ExitStatus{5, 0}});  // crashed while checkpointing
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0, 2, 3}));
  ASSERT_EQ(All<CheckHostAction>().size(), 1u);
  KillAllBut(1);
  Feed(HostChecked{"127.0.0.2", true, ""});
  // The newest complete checkpoint, whatever it is: the morph's may not have completed.
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_FALSE(launch.expected_step.has_value());
  EXPECT_EQ(launch.plan.replicas, 1);
}

// A policy that always takes one stage: the controller launches what its policy says.
class OneStagePolicy : public ShapePolicy {
 public:
  Result<GridPlan> Plan(const ShapeRequest& request) const override {
    return FixedStagesPolicy(1).Plan(request);
  }
};

TEST_F(ControllerTest, TheShapeComesFromThePolicy) {
  ControllerOptions o = Options();
  o.policy = std::make_shared<OneStagePolicy>();
  Make(o);
  Feed(StartInput{List("localhost slots=3\n"), {}});
  EXPECT_EQ(OnlyLaunch().plan.stages, 1);
  EXPECT_EQ(OnlyLaunch().plan.replicas, 3);
}

// One stage, every shape predicted at 0.1 s a step (each rank's compute at `expected_compute_s`
// when > 0); remembers the corrections it was asked with.
class PredictingPolicy : public ShapePolicy {
 public:
  Result<GridPlan> Plan(const ShapeRequest& request) const override {
    *asked_with = request.corrections;
    Result<GridPlan> plan = FixedStagesPolicy(1).Plan(request);
    if (plan.ok()) plan->predicted_step_s = 0.1;
    if (plan.ok() && expected_compute_s > 0) {
      plan->expected_compute_s.assign(plan->world_size(), expected_compute_s);
    }
    return plan;
  }
  bool WeighsSpeeds() const override { return weighs; }
  double expected_compute_s = 0;
  bool weighs = false;
  std::shared_ptr<std::vector<planner::SpeedCorrection>> asked_with =
      std::make_shared<std::vector<planner::SpeedCorrection>>();
};

class ControllerProfileCheckTest : public ControllerTest {
 protected:
  void SetUp() override { Launch("127.0.0.2 slots=2\n"); }
  // A new job on `list` (two slots), both ranks started and ready.
  void Launch(const std::string& list) {
    ControllerOptions o = Options();
    o.policy = policy_;
    Make(o);
    Feed(StartInput{List(list), {}});
    for (int r = 0; r < 2; ++r) Feed(RankStarted{0, r, 100 + r});
    for (int r = 0; r < 2; ++r) Feed(RankReport{0, r, RankReport::Kind::kReady, 0});
  }
  // Rank 0 reports `steps` steps of `seconds` each; the record of the check, if any came.
  std::optional<RecordAction> Steps(int steps, double seconds) {
    std::optional<RecordAction> check;
    for (int i = 0; i < steps; ++i) {
      RankReport step{0, 0, RankReport::Kind::kStep, ++step_};
      step.seconds = seconds;
      Feed(step);
      for (const RecordAction& r : All<RecordAction>()) {
        if (r.event == "profile_check") check = r;
      }
    }
    return check;
  }
  // A new job on A and B (one slot each) whose plan expects 0.08 s of compute of each rank;
  // their first heartbeats say `a_s` and `b_s`, and its first steps take `step_s` each.
  void TwoMachinesComputing(double a_s, double b_s, double step_s) {
    policy_->expected_compute_s = 0.08;
    step_ = 0;
    Launch("127.0.0.2 slots=1\n127.0.0.3 slots=1\n");
    for (const auto& [rank, compute_s] : {std::pair{0, a_s}, std::pair{1, b_s}}) {
      RankReport beat{0, rank, RankReport::Kind::kHeartbeat, 0};
      beat.compute_s = compute_s;
      Feed(beat);
    }
    ASSERT_TRUE(Steps(ProfileCheck::kWarmUpSteps + ProfileCheck::kMeasuredSteps, step_s));
  }
  // The correction of `address` the policy was last asked with (0: none).
  double FactorOf(const std::string& address) const {
    for (const planner::SpeedCorrection& c : *policy_->asked_with) {
      if (c.address == address) return c.factor;
    }
    return 0;
  }
  std::shared_ptr<PredictingPolicy> policy_ = std::make_shared<PredictingPolicy>();
  int64_t step_ = 0;
};

TEST_F(ControllerProfileCheckTest, StepsAsPredictedAreRecordedAndCorrectNothing) {
  EXPECT_FALSE(Steps(ProfileCheck::kWarmUpSteps + ProfileCheck::kMeasuredSteps - 1, 0.105));
  const std::optional<RecordAction> check = Steps(1, 0.105);
  ASSERT_TRUE(check);
  EXPECT_EQ(check->line, "");
  EXPECT_EQ(check->fields.ToJson().find("\"corrections\":[]") != std::string::npos, true)
      << check->fields.ToJson();
  EXPECT_FALSE(Steps(30, 0.105)) << "checked once per generation";
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});
  EXPECT_TRUE(policy_->asked_with->empty());
}

TEST_F(ControllerProfileCheckTest, SlowerStepsCorrectTheSpeedTheNextPlansUse) {
  // The warm-up's slow steps do not count; the median ignores one outlier.
  Steps(ProfileCheck::kWarmUpSteps, 1.0);
  Steps(1, 5.0);
  const std::optional<RecordAction> check = Steps(ProfileCheck::kMeasuredSteps - 1, 0.15);
  ASSERT_TRUE(check);
  EXPECT_NE(check->line.find("steps of 1 x 2 take 0.150 s, 1.50 times the 0.100 s the profile "
                             "predicted: the next plans correct its speeds: 127.0.0.2 with 2 busy "
                             "takes 1.50 times the profile's time"),
            std::string::npos)
      << check->line;
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});
  ASSERT_EQ(policy_->asked_with->size(), 1u);
  const planner::SpeedCorrection& c = policy_->asked_with->front();
  EXPECT_EQ(c.address, "127.0.0.2");
  EXPECT_EQ(c.busy, 2);
  EXPECT_NEAR(c.factor, 1.5, 1e-12);
}

// Rank 0 on A computes as its plan expected, rank 1 on B 2.5 times that, and the steps take 2.6
// times the prediction: B, which the steps wait for, is corrected by its 2.5 and the 1.04 no
// computation explains (its messages, say), 2.6; A is not taken for slow.
TEST_F(ControllerProfileCheckTest, EachMachineIsCorrectedByWhatItsRanksComputedAgainstThePlan) {
  TwoMachinesComputing(0.08, 0.2, 0.26);
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});
  ASSERT_EQ(policy_->asked_with->size(), 2u);
  for (const planner::SpeedCorrection& c : *policy_->asked_with) EXPECT_EQ(c.busy, 1);
  EXPECT_NEAR(FactorOf("127.0.0.2"), 1.0, 1e-12);
  EXPECT_NEAR(FactorOf("127.0.0.3"), 2.6, 1e-12);
}

// Both compute 1.5 times what the plan expected and the steps take 1.6 times: the step waits
// for both, and each is corrected by the steps' 1.6.
TEST_F(ControllerProfileCheckTest, MachinesSlowAlikeAreEachCorrectedByTheSteps) {
  TwoMachinesComputing(0.12, 0.121, 0.16);
  Feed(MachinesChanged{List("127.0.0.2 slots=1\n")});
  EXPECT_NEAR(FactorOf("127.0.0.2"), 1.6 * 0.12 / 0.121, 1e-12);
  EXPECT_NEAR(FactorOf("127.0.0.3"), 1.6, 1e-12);
}

// After the check, a straggler on B measured against its peers on the same steps: B is at least
// that many times slower than A was found (1.0 x 3 over the check's 2.6), and a finding below
// what the check found (1.0 x 2) leaves it; neither compounds with the check.
TEST_F(ControllerProfileCheckTest, AStragglerAfterTheCheckIsFoundAgainstWhatItsPeersWereFound) {
  policy_->weighs = true;
  TwoMachinesComputing(0.08, 0.2, 0.26);
  Feed(SlowMachine{"127.0.0.3", 2.0});
  EXPECT_NEAR(FactorOf("127.0.0.3"), 2.6, 1e-12);
  Feed(SlowMachine{"127.0.0.3", 3.0});
  EXPECT_NEAR(FactorOf("127.0.0.3"), 3.0, 1e-12);
}

// One stage over the machines, each replica even, but 5,3 of the 8 micro-batches where the
// second machine is corrected 1.5 times slower or more: a planner that weighs speeds, in brief.
class WeighingPolicy : public ShapePolicy {
 public:
  Result<GridPlan> Plan(const ShapeRequest& request) const override {
    *asked_with = request.corrections;
    Result<GridPlan> plan = FixedStagesPolicy(1).Plan(request);
    for (const planner::SpeedCorrection& c : request.corrections) {
      if (plan.ok() && c.address == "127.0.0.3" && c.factor >= 1.5) plan->shares = {5, 3};
    }
    if (plan.ok() && !unmeasured.empty()) plan->unmeasured = {unmeasured};
    return plan;
  }
  std::string unmeasured;  // a machine every plan says the profile has no figures of
  bool WeighsSpeeds() const override { return true; }
  std::shared_ptr<std::vector<planner::SpeedCorrection>> asked_with =
      std::make_shared<std::vector<planner::SpeedCorrection>>();
};

class ControllerSlowMachineTest : public ControllerTest {
 protected:
  void Start(std::shared_ptr<const ShapePolicy> policy) {
    ControllerOptions o = Options();
    o.chunk_size = 2;  // 8 micro-batches
    o.policy = std::move(policy);
    Make(o);
    Feed(StartInput{List("127.0.0.2 slots=1\n127.0.0.3 slots=1\n"), {}});
    RunGeneration(5);
  }
  std::optional<RecordAction> Told() const {
    for (const RecordAction& r : All<RecordAction>()) {
      if (r.event == "slow_machine") return r;
    }
    return std::nullopt;
  }
  bool Drained(const std::string& address) const {
    for (const MachineView& v : controller_->Machines()) {
      if (v.machine.Address() == address) return v.state == MachineState::kDrained;
    }
    return false;
  }
  std::shared_ptr<WeighingPolicy> weighing_ = std::make_shared<WeighingPolicy>();
};

TEST_F(ControllerSlowMachineTest, AMachineSlowerThanPlannedIsReplannedWithLessWorkNotDrained) {
  Start(weighing_);
  Feed(SlowMachine{"127.0.0.3", 1.6});
  const std::optional<RecordAction> told = Told();
  ASSERT_TRUE(told);
  EXPECT_EQ(told->fields.GetString("action"), "replan");
  EXPECT_EQ(told->line, "mitra: 127.0.0.3 computes 1.60 times what its plan expected; re-planned "
                        "with it that much slower: 1 x 2, shares 5,3, by a planned morph");
  ASSERT_EQ(weighing_->asked_with->size(), 1u);
  EXPECT_EQ(weighing_->asked_with->front().address, "127.0.0.3");
  EXPECT_EQ(weighing_->asked_with->front().busy, 1);
  EXPECT_NEAR(weighing_->asked_with->front().factor, 1.6, 1e-12);
  EXPECT_EQ(controller_->phase(), Phase::kMorphing);
  EXPECT_EQ(SignalsOf(SIGUSR1), (std::vector<int>{0, 1}));
  StopAll(6);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.expected_step, 6);
  EXPECT_EQ(Addresses(launch), (std::vector<std::string>{"127.0.0.2", "127.0.0.3"}));
  EXPECT_EQ(launch.plan.shares, (planner::Shares{5, 3}));
  EXPECT_FALSE(Drained("127.0.0.3"));
  // The next generation was planned with 1.6: what its steps find compounds with it.
  RunGeneration(7);
  Feed(SlowMachine{"127.0.0.3", 1.2});
  ASSERT_TRUE(Told());
  EXPECT_NEAR(weighing_->asked_with->front().factor, 1.6 * 1.2, 1e-12);
}

// A machine the profile has no figures of is told at the launch that first runs ranks there,
// once: later launches (here the re-plan its steps led to) say nothing more.
TEST_F(ControllerSlowMachineTest, AMachineWithoutFiguresIsToldOnceAndItsStepsMeasureIt) {
  weighing_->unmeasured = "127.0.0.3";
  ControllerOptions o = Options();
  o.chunk_size = 2;
  o.policy = weighing_;
  Make(o);
  Feed(StartInput{List("127.0.0.2 slots=1\n127.0.0.3 slots=1\n"), {}});
  const auto told_unmeasured = [&] {
    std::vector<RecordAction> out;
    for (const RecordAction& r : All<RecordAction>()) {
      if (r.event == "unmeasured_machine") out.push_back(r);
    }
    return out;
  };
  ASSERT_EQ(told_unmeasured().size(), 1u);
  EXPECT_EQ(told_unmeasured()[0].fields.GetString("machine"), "127.0.0.3");
  EXPECT_EQ(told_unmeasured()[0].line,
            "mitra: 127.0.0.3 is not in the profile: planned like the profile's first machine "
            "until its steps measure it (slower than planned, it gets less work)");
  RunGeneration(5);
  Feed(SlowMachine{"127.0.0.3", 1.6});
  StopAll(6);
  EXPECT_EQ(OnlyLaunch().plan.shares, (planner::Shares{5, 3}));
  EXPECT_TRUE(told_unmeasured().empty()) << "told again";
}

TEST_F(ControllerSlowMachineTest, APlanThatStaysTheSameKeepsTheJobAsItIs) {
  Start(weighing_);
  Feed(SlowMachine{"127.0.0.3", 1.2});
  const std::optional<RecordAction> told = Told();
  ASSERT_TRUE(told);
  EXPECT_EQ(told->fields.GetString("action"), "keep");
  EXPECT_NE(told->line.find("the plan with it that much slower is the one running (1 x 2)"),
            std::string::npos)
      << told->line;
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  // The correction stays. A second finding about the same steps (another rank there) measures
  // the same plan again: it replaces the first, 1.3 and not 1.2 x 1.3, and the plan stays.
  Feed(SlowMachine{"127.0.0.3", 1.3});
  ASSERT_TRUE(Told());
  EXPECT_EQ(Told()->fields.GetString("action"), "keep");
  EXPECT_NEAR(weighing_->asked_with->front().factor, 1.3, 1e-12);
}

TEST_F(ControllerSlowMachineTest, ARankSlowerThanItsPeersOnTheOnlyMachineChangesNothing) {
  ControllerOptions o = Options();
  o.policy = weighing_;
  Make(o);
  Feed(StartInput{List("127.0.0.3 slots=2\n"), {}});
  RunGeneration(5);
  Feed(SlowMachine{"127.0.0.3", 2.0});
  ASSERT_TRUE(Told());
  EXPECT_EQ(Told()->fields.GetString("action"), "none");
  EXPECT_NE(Told()->line.find("the job runs on no other machine"), std::string::npos);
  EXPECT_TRUE(weighing_->asked_with->empty());  // no correction was made, nothing re-planned
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
}

TEST_F(ControllerSlowMachineTest, WithoutAPlannerThatWeighsSpeedsNothingChanges) {
  Start(std::make_shared<FixedStagesPolicy>(1));
  Feed(SlowMachine{"127.0.0.3", 2.0});
  const std::optional<RecordAction> told = Told();
  ASSERT_TRUE(told);
  EXPECT_EQ(told->fields.GetString("action"), "none");
  EXPECT_NE(told->line.find("--exclude-stragglers would drain it"), std::string::npos) << told->line;
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  EXPECT_FALSE(Drained("127.0.0.3"));
}

TEST_F(ControllerTest, AnExtraSlotThatChangesNoShapeDoesNotMorph) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  RunGeneration(1);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=1\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  EXPECT_EQ(controller_->Machines()[1].state, MachineState::kIdle);
}

TEST_F(ControllerTest, AChangeDuringAMorphIsFoldedIntoIt) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(1);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.4 slots=4\n")});
  EXPECT_TRUE(All<SignalAction>().empty()) << "a second change signalled again";
  EXPECT_TRUE(All<LaunchAction>().empty());
  Feed(HostChecked{"127.0.0.4", true, ""});
  EXPECT_TRUE(All<SignalAction>().empty());
  StopAll(2);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.replicas, 3);
  EXPECT_EQ(Addresses(launch)[2], "127.0.0.4");
}

// Ranks not ready yet may not have their SIGUSR1 handler: the morph waits until they are.
TEST_F(ControllerTest, AMorphBeforeEveryRankIsReadyWaitsUntilTheyAre) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  Feed(RankStarted{0, 0, 10});
  Feed(RankStarted{0, 1, 11});
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n")});
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_TRUE(All<SignalAction>().empty());
  Feed(RankReport{0, 0, RankReport::Kind::kReady, 0});
  EXPECT_TRUE(All<SignalAction>().empty());
  Feed(RankReport{0, 1, RankReport::Kind::kReady, 0});
  EXPECT_EQ(SignalsOf(SIGUSR1), (std::vector<int>{0, 1}));
  StopAll(0);
  EXPECT_EQ(OnlyLaunch().plan.replicas, 2);
  EXPECT_FALSE(Recorded("failure"));
}

// A list edit during the start that the running shape absorbs changes nothing, then or later.
TEST_F(ControllerTest, AChangeBeforeEveryRankIsReadyThatKeepsTheShapeWaitsForNothing) {
  Feed(StartInput{List("127.0.0.2 slots=2\n"), {}});
  Feed(RankStarted{0, 0, 10});
  Feed(RankStarted{0, 1, 11});
  Feed(MachinesChanged{List("127.0.0.2 slots=3\n")});
  RunGeneration(1);
  EXPECT_TRUE(All<SignalAction>().empty());
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
}

TEST_F(ControllerTest, AFailedRankStopsTheOthersChecksItsMachineAndRelaunches) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(3);
  Feed(RankExited{0, 2, launcher::ExitStatus{7, 0}});
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0, 1, 3}));
  ASSERT_EQ(All<CheckHostAction>().size(), 1u);
  EXPECT_EQ(All<CheckHostAction>()[0].machine.Address(), "127.0.0.3");
  KillAllBut(2);
  EXPECT_TRUE(All<LaunchAction>().empty()) << "relaunched before the health check answered";
  Feed(HostChecked{"127.0.0.3", true, ""});
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.replicas, 2);
  EXPECT_FALSE(launch.expected_step.has_value());
  RunGeneration(3);
  EXPECT_TRUE(Recorded("first_step"));
}

TEST_F(ControllerTest, ALostMachineIsLeftOutAtOnceThenRejoinsOnceHealthy) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(3);
  launcher::ExitStatus lost;
  lost.lost = true;
  lost.exit_code = -1;
  Feed(RankExited{0, 3, lost});
  Feed(RankExited{0, 2, lost});
  // Its connection was lost: the relaunch does not wait for a check that would time out.
  KillAllBut(-1);
  const LaunchAction& launch = OnlyLaunch();
  EXPECT_EQ(launch.plan.replicas, 1);
  EXPECT_EQ(Addresses(launch), (std::vector<std::string>{"127.0.0.2", "127.0.0.2"}));
  Feed(HostChecked{"127.0.0.3", false, "connection refused"});
  EXPECT_TRUE(All<LaunchAction>().empty());
  RunGeneration(4);
  // The next check is due after the backoff; until then nothing is asked.
  Advance(1);
  EXPECT_TRUE(All<CheckHostAction>().empty());
  Advance(1.5);
  ASSERT_EQ(All<CheckHostAction>().size(), 1u);
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_EQ(controller_->phase(), Phase::kMorphing);
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 2u);
  StopAll(5);
  EXPECT_EQ(OnlyLaunch().plan.replicas, 2);
}

TEST_F(ControllerTest, AnUncheckedMachineIsLeftOutWhenTheHealthWaitEnds) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(3);
  Feed(RankExited{0, 2, launcher::ExitStatus{1, 0}});
  KillAllBut(2);
  EXPECT_TRUE(All<LaunchAction>().empty());
  Advance(3);
  EXPECT_EQ(OnlyLaunch().plan.replicas, 1);
  EXPECT_EQ(controller_->Machines()[1].state, MachineState::kChecking);
}

TEST_F(ControllerTest, AHungRankIsFoundByItsMissingHeartbeats) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Advance(2);
  Feed(RankReport{0, 0, RankReport::Kind::kHeartbeat, 0});  // rank 0 lives, rank 1 is silent
  Advance(2.9);
  EXPECT_FALSE(Recorded("failure"));
  Advance(0.2);
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(SignalsOf(SIGKILL), (std::vector<int>{0, 1}));
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_NE(controller_->reason().find("rank 1"), std::string::npos) << controller_->reason();
  EXPECT_NE(controller_->reason().find("no heartbeat"), std::string::npos);
  // The silent rank is being killed: no deadline in the past keeps the loop spinning meanwhile.
  EXPECT_GT(controller_->NextDeadline(), now_);
}

TEST_F(ControllerTest, ARankSilentFromItsStartIsStartingUntilTheStartTimeout) {
  // A busy machine or a shared file system makes a program's imports take tens of seconds:
  // before its first heartbeat a rank is starting, bounded by --start-timeout alone.
  Feed(StartInput{List("localhost slots=2\n"), {}});
  const int64_t g = controller_->generation();
  const double launched = now_;
  Feed(RankStarted{g, 0, 100});
  Feed(RankStarted{g, 1, 101});
  Feed(RankReport{g, 0, RankReport::Kind::kStarting, 0});  // rank 1 never says a word
  for (int i = 0; i < 10; ++i) {
    Feed(RankReport{g, 0, RankReport::Kind::kHeartbeat, 0});
    Advance(1);
  }
  ASSERT_TRUE(Recorded("starting"));
  const RecordAction note = All<RecordAction>()[0];
  EXPECT_EQ(note.line,
            "mitra: 2 of 2 workers starting for 10 s (1 still loading its program); waiting up "
            "to 300 s (--start-timeout)");
  EXPECT_EQ(controller_->reason(), note.line.substr(7));
  for (int i = 0; i < 30; ++i) {
    Feed(RankReport{g, 0, RankReport::Kind::kHeartbeat, 0});
    Advance(1);
  }
  EXPECT_TRUE(Recorded("starting")) << "again 30 s after the first note";
  Feed(RankReport{g, 0, RankReport::Kind::kReady, 0});
  now_ = launched + ControllerOptions().startup_timeout_s - 1;
  Feed(RankReport{g, 0, RankReport::Kind::kHeartbeat, 0});
  EXPECT_NE(controller_->phase(), Phase::kRecovering) << controller_->reason();
  EXPECT_LE(controller_->NextDeadline(), launched + ControllerOptions().startup_timeout_s);
  Advance(1);
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_NE(controller_->reason().find("rank 1"), std::string::npos) << controller_->reason();
  EXPECT_NE(controller_->reason().find(
                "was not ready 300 s after its launch, and said nothing: its program never "
                "reached mitra (--start-timeout 300 s: give a slow program longer)"),
            std::string::npos)
      << controller_->reason();
}

TEST_F(ControllerTest, TheStartTimeoutGrowsToThreeTimesTheSlowestStartOfTheJob) {
  ControllerOptions options = Options();
  options.startup_timeout_s = 60;
  Make(options);
  Feed(StartInput{List("localhost slots=2\n"), {}});
  int64_t g = controller_->generation();
  Feed(RankStarted{g, 0, 100});
  Feed(RankStarted{g, 1, 101});
  now_ += 50;  // a slow first start, within the timeout
  Feed(RankReport{g, 0, RankReport::Kind::kReady, 0});
  Feed(RankReport{g, 1, RankReport::Kind::kReady, 0});
  EXPECT_EQ(controller_->reason(), "") << "the starting note ends with the start";
  Feed(RankReport{g, 0, RankReport::Kind::kStep, 1});
  Feed(RankExited{g, 1, launcher::ExitStatus{1, 0}});
  KillAllBut(1);
  Feed(HostChecked{"localhost", true, ""});
  ASSERT_EQ(controller_->generation(), g + 1) << controller_->reason();
  g = controller_->generation();
  const double launched = now_;
  Feed(RankStarted{g, 0, 200});
  Feed(RankStarted{g, 1, 201});
  Feed(RankReport{g, 1, RankReport::Kind::kStarting, 0});
  now_ = launched + 149;  // 3 x 50 s
  Feed(RankReport{g, 0, RankReport::Kind::kReady, 0});
  Feed(RankReport{g, 0, RankReport::Kind::kHeartbeat, 0});
  EXPECT_EQ(controller_->phase(), Phase::kRunning) << controller_->reason();
  Advance(1);
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_NE(controller_->reason().find("was not ready 150 s after its launch (--start-timeout "
                                       "60 s, tripled to the slowest start of this job"),
            std::string::npos)
      << controller_->reason();
}

TEST_F(ControllerTest, AReadyRankThatNeverBeatsIsHungAfterTheHeartbeatTimeout) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  const int64_t g = controller_->generation();
  Feed(RankStarted{g, 0, 100});
  Feed(RankStarted{g, 1, 101});
  Feed(RankReport{g, 0, RankReport::Kind::kReady, 0});
  Feed(RankReport{g, 1, RankReport::Kind::kReady, 0});
  for (int i = 0; i < 4; ++i) {
    Advance(1);
    Feed(RankReport{g, 0, RankReport::Kind::kHeartbeat, 0});
  }
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  Advance(1);
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  EXPECT_NE(controller_->reason().find(
                "rank 1 (pid 101) sent no heartbeat for 5 s (hung, stopped, or cut off; "
                "--heartbeat-timeout 5 s)"),
            std::string::npos)
      << controller_->reason();
}

TEST_F(ControllerTest, AStartThatWorksAfterAFailedOneIsNoRecoveryOfTraining) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  for (int r = 0; r < 2; ++r) Feed(RankStarted{0, r, 100 + r});
  Feed(RankExited{0, 1, launcher::ExitStatus{1, 0}});  // before any step
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  ASSERT_EQ(OnlyLaunch().generation, 1);
  now_ += 4;
  RunGeneration(1);
  const auto records = All<RecordAction>();
  const auto first = std::find_if(records.begin(), records.end(),
                                  [](const RecordAction& r) { return r.event == "first_step"; });
  ASSERT_NE(first, records.end());
  EXPECT_EQ(first->line.rfind("mitra: started after a failed start: training in 2 x 1 at step 1; "
                              "4 s since the failure (",
                              0),
            0u)
      << first->line;
}

TEST_F(ControllerTest, RanksThatStoppedTrainingMayWorkOnWithoutHeartbeats) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(100);
  RankReport stopped{0, 0, RankReport::Kind::kStopped, 100};
  stopped.finished = true;
  Feed(stopped);
  EXPECT_FALSE(Recorded("training_done"));
  stopped.rank = 1;
  Feed(stopped);
  EXPECT_TRUE(Recorded("training_done"));
  Feed(RankExited{0, 1, launcher::ExitStatus{0, 0}});
  // Rank 0 evaluates for minutes after training: no heartbeat, past the finish timeout.
  Advance(300);
  EXPECT_FALSE(Recorded("failure"));
  EXPECT_FALSE(Recorded("finish_timeout"));
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
  // A list edit now changes nothing: the job is trained.
  Feed(MachinesChanged{List("localhost slots=1\n")});
  EXPECT_TRUE(SignalsOf(SIGUSR1).empty());
  Feed(RankExited{0, 0, launcher::ExitStatus{0, 0}});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kDone);
}

TEST_F(ControllerTest, AFailureAfterTrainingFinishedIsReportedAndNeverRelaunched) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(100);
  for (int r = 0; r < 2; ++r) {
    RankReport stopped{0, r, RankReport::Kind::kStopped, 100};
    stopped.finished = true;
    Feed(stopped);
  }
  Feed(RankExited{0, 1, launcher::ExitStatus{3, 0}});
  EXPECT_TRUE(Recorded("failure_after_training"));
  EXPECT_TRUE(SignalsOf(SIGKILL).empty()) << "rank 0 may finish its own work";
  Feed(RankExited{0, 0, launcher::ExitStatus{0, 0}});
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kFailed);
  EXPECT_NE(All<FinishAction>()[0].reason.find("after training finished at step 100"),
            std::string::npos)
      << All<FinishAction>()[0].reason;
}

TEST_F(ControllerTest, TooManyFailuresWithinTheWindowFailTheJob) {
  ControllerOptions o = Options();
  o.max_restarts = 2;
  Make(o);
  Feed(StartInput{List("localhost slots=2\n"), {}});
  for (int attempt = 0; attempt < 3; ++attempt) {
    RunGeneration(1);
    Feed(RankExited{controller_->generation(), 0, launcher::ExitStatus{1, 0}});
    Feed(RankExited{controller_->generation(), 1, launcher::ExitStatus{0, SIGKILL}});
    if (attempt == 2) break;
    Feed(HostChecked{"localhost", true, ""});
    ASSERT_EQ(All<LaunchAction>().size(), 1u) << "attempt " << attempt;
  }
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kFailed);
  EXPECT_NE(All<FinishAction>()[0].reason.find("--max-restarts 2"), std::string::npos)
      << All<FinishAction>()[0].reason;
}

TEST_F(ControllerTest, WithoutRestartsTheFirstFailureFailsTheJob) {
  ControllerOptions o = Options();
  o.max_restarts = 0;
  Make(o);
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Feed(RankExited{0, 1, launcher::ExitStatus{3, 0}});
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kFailed);
  EXPECT_NE(All<FinishAction>()[0].reason.find("rank 1 (pid 101) exited with code 3"),
            std::string::npos)
      << All<FinishAction>()[0].reason;
}

// Rank `rank` of the current generation exits with `code`, having printed `lines`.
RankExited ExitedWith(int64_t generation, int rank, int code, std::vector<std::string> lines) {
  return RankExited{generation, rank, launcher::ExitStatus{code, 0}, ExcerptOf({}, lines)};
}

// A rank refuses its input in its first step (a model declared micro-batch independent that
// draws random numbers): its peer loses it and parks before the manager sees the exit. The
// exit is the cause all the same: the job ends with it rather than relaunching.
TEST_F(ControllerTest, ExitCodeTwoAfterAPeerParkedUnaskedStillEndsTheJob) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  for (int r = 0; r < 2; ++r) Feed(RankStarted{0, r, 100 + r});
  for (int r = 0; r < 2; ++r) {
    RankReport ready{0, r, RankReport::Kind::kReady, 0};
    ready.can_park = true;
    Feed(ready);
  }
  Feed(RankReport{0, 1, RankReport::Kind::kParked, -1});
  EXPECT_EQ(controller_->phase(), Phase::kRecovering);
  Feed(ExitedWith(0, 0, 2, {"[2025-01-01 12:00:00.000] [error] rank 0: segment 'body' draws "
                            "random numbers in training"}));
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  const FinishAction finish = All<FinishAction>()[0];
  EXPECT_EQ(finish.outcome, FinishAction::Outcome::kBadConfiguration);
  EXPECT_NE(finish.reason.find("segment 'body' draws random numbers"), std::string::npos)
      << finish.reason;
}

TEST_F(ControllerTest, ExitCodeTwoBeforeTheJobsFirstStepEndsTheJobAtOnce) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  for (int r = 0; r < 2; ++r) Feed(RankStarted{0, r, 100 + r});
  Feed(ExitedWith(0, 1, 2, {"[2025-01-01 12:00:00.000] [error] rank 1: unknown schedule 'zb-v'"}));
  EXPECT_TRUE(Recorded("failure"));
  EXPECT_EQ(SignalsOf(SIGKILL), std::vector<int>{0});
  EXPECT_TRUE(All<CheckHostAction>().empty()) << "the job ends: no machine is blamed";
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  const FinishAction finish = All<FinishAction>()[0];
  EXPECT_EQ(finish.outcome, FinishAction::Outcome::kBadConfiguration);
  EXPECT_NE(finish.reason.find("exited with code 2: rank 1: unknown schedule 'zb-v'"),
            std::string::npos)
      << finish.reason;
}

TEST_F(ControllerTest, ExitCodeTwoAfterTheJobsFirstStepIsRecoveredAsAnyFailure) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Feed(ExitedWith(0, 1, 2, {"bad placement line"}));
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  EXPECT_EQ(OnlyLaunch().generation, 1);
  // The job trained: a later generation's exit 2 before its own first step is no verdict on
  // the configuration either.
  for (int r = 0; r < 2; ++r) Feed(RankStarted{1, r, 200 + r});
  Feed(ExitedWith(1, 0, 2, {"bad placement line"}));
  Feed(RankExited{1, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  EXPECT_EQ(OnlyLaunch().generation, 2);
}

TEST_F(ControllerTest, TheSameFailureBeforeTheFirstStepTwiceInARowEndsTheJob) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  const std::vector<std::string> crash = {
      "terminate called after throwing an instance of 'c10::Error'",
      "  what():  \"addmm_impl_cpu_\" not implemented for 'BFloat16'"};
  for (int64_t g = 0; g < 2; ++g) {
    for (int r = 0; r < 2; ++r) Feed(RankStarted{g, r, 100 + r});
    Feed(ExitedWith(g, 0, 134, crash));
    Feed(RankExited{g, 1, launcher::ExitStatus{0, SIGKILL}});
    if (g == 0) {
      Feed(HostChecked{"localhost", true, ""});
      ASSERT_EQ(OnlyLaunch().generation, 1) << "the first such failure is relaunched";
    }
  }
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  const FinishAction finish = All<FinishAction>()[0];
  EXPECT_EQ(finish.outcome, FinishAction::Outcome::kFailed);
  EXPECT_NE(finish.reason.find("not implemented for 'BFloat16' (before the first step, as in "
                               "the launch before"),
            std::string::npos)
      << finish.reason;
}

// A remote machine that fails the same way twice is kept out and the job goes on without it;
// the same failure on another machine then is the program's.
TEST_F(ControllerTest, AnEarlyFailureRepeatedOnAFlakyMachineIsRetriedWithoutIt) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  const std::vector<std::string> crash = {"Error: CUDA error: uncorrectable ECC error"};
  auto fail_rank = [&](int failed) {
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    for (int r = 0; r < world; ++r) Feed(RankStarted{g, r, 100 + r});
    Feed(ExitedWith(g, failed, 1, crash));
    for (int r = 0; r < world; ++r) {
      if (r != failed) Feed(RankExited{g, r, launcher::ExitStatus{0, SIGKILL}});
    }
  };
  fail_rank(2);  // on 127.0.0.3: checked, and it passes
  Feed(HostChecked{"127.0.0.3", true, ""});
  ASSERT_EQ(OnlyLaunch().plan.world_size(), 4);
  fail_rank(2);  // on 127.0.0.3 again: kept out, the job goes on without it
  ASSERT_EQ(OnlyLaunch().plan.world_size(), 2);
  EXPECT_EQ(Addresses(OnlyLaunch()), (std::vector<std::string>{"127.0.0.2", "127.0.0.2"}));
  fail_rank(0);  // the same failure on 127.0.0.2
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_NE(All<FinishAction>()[0].reason.find("as in the launch before"), std::string::npos)
      << All<FinishAction>()[0].reason;
}

TEST_F(ControllerTest, AnEarlyFailureAfterAGenerationThatTrainedIsRelaunched) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  const std::vector<std::string> crash = {"Error: connection refused"};
  for (int r = 0; r < 2; ++r) Feed(RankStarted{0, r, 100 + r});
  Feed(ExitedWith(0, 0, 1, crash));
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  ASSERT_EQ(OnlyLaunch().generation, 1);
  RunGeneration(3);  // generation 1 trains, then fails
  Feed(ExitedWith(1, 0, 1, crash));
  Feed(RankExited{1, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  ASSERT_EQ(OnlyLaunch().generation, 2);
  for (int r = 0; r < 2; ++r) Feed(RankStarted{2, r, 300 + r});
  Feed(ExitedWith(2, 0, 1, crash));  // like generation 0's, but a step was trained since
  Feed(RankExited{2, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  EXPECT_EQ(OnlyLaunch().generation, 3);
}

TEST_F(ControllerTest, AFlappingMachineIsKeptOutWithExponentialBackoff) {
  ControllerOptions o = Options();
  o.stages = 1;
  Make(o);
  Feed(StartInput{List("localhost slots=1\n127.0.0.3 slots=1\n"), {}});
  RunGeneration(1);
  Feed(RankExited{0, 1, launcher::ExitStatus{1, 0}});
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  std::vector<double> retries;
  for (int i = 0; i < 3; ++i) {
    Feed(HostChecked{"127.0.0.3", false, "connection refused"});
    for (const RecordAction& r : All<RecordAction>()) {
      if (r.event == "host_failed") retries.push_back(*r.fields.GetNumber("retry_in_s"));
    }
    // The next check (the relaunched rank, never started, is only a starting note meanwhile).
    do {
      now_ = controller_->NextDeadline();
      Feed(TimerInput{});
    } while (All<CheckHostAction>().empty());
  }
  EXPECT_EQ(retries, (std::vector<double>{2, 4, 8}));
  EXPECT_EQ(controller_->Machines()[1].state, MachineState::kChecking);
}

TEST_F(ControllerTest, AStopDuringAMorphFinishesWithoutRelaunching) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  RunGeneration(1);
  Feed(MachinesChanged{List("127.0.0.2 slots=2\n")});
  Feed(StopInput{"SIGINT"});
  EXPECT_TRUE(All<SignalAction>().empty());
  StopAll(2);
  EXPECT_TRUE(All<LaunchAction>().empty());
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kStopped);
}

TEST_F(ControllerTest, WorkersThatDoNotStopAreTerminatedThenKilled) {
  ControllerOptions o = Options();
  o.stop_timeout_s = 10;
  Make(o);
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Feed(StopInput{"SIGTERM"});
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 2u);
  AdvanceAlive(10);
  EXPECT_EQ(SignalsOf(SIGTERM).size(), 2u);
  Advance(3);
  EXPECT_EQ(SignalsOf(SIGKILL).size(), 2u);
  EXPECT_TRUE(Recorded("kill"));
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kFailed);
  EXPECT_NE(All<FinishAction>()[0].reason.find("did not stop within 10 s"), std::string::npos);
}

TEST_F(ControllerTest, ASecondStopKillsAtOnce) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Feed(StopInput{"SIGINT"});
  Feed(StopInput{"SIGINT"});
  EXPECT_EQ(SignalsOf(SIGTERM).size(), 2u);
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGTERM}});
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGTERM}});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kFailed);
}

TEST_F(ControllerTest, AStopWhileWaitingFinishesAtOnce) {
  Feed(StartInput{List("localhost slots=1\n"), {}});
  Feed(StopInput{"mitra stop"});
  ASSERT_EQ(All<FinishAction>().size(), 1u);
  EXPECT_EQ(All<FinishAction>()[0].outcome, FinishAction::Outcome::kStopped);
}

TEST_F(ControllerTest, ReportsOfAnEarlierGenerationAreIgnored) {
  Feed(StartInput{List("localhost slots=2\n"), {}});
  RunGeneration(1);
  Feed(RankExited{0, 0, launcher::ExitStatus{1, 0}});
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"localhost", true, ""});
  ASSERT_EQ(controller_->generation(), 1);
  RunGeneration(1);
  Feed(RankExited{0, 0, launcher::ExitStatus{9, 0}});  // a straggler of generation 0
  EXPECT_FALSE(Recorded("failure"));
  EXPECT_EQ(controller_->phase(), Phase::kRunning);
}

TEST_F(ControllerTest, ARankThatCannotBeStartedBlamesItsMachine) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {}});
  Feed(RankStarted{0, 0, 10});
  Feed(RankStarted{0, 1, 11});
  Feed(RankStartFailed{0, 2, "connection refused"});
  Feed(RankStartFailed{0, 3, "connection refused"});
  ASSERT_EQ(All<CheckHostAction>().size(), 0u);  // asked once, with the first failure
  Feed(RankExited{0, 0, launcher::ExitStatus{0, SIGKILL}});
  Feed(RankExited{0, 1, launcher::ExitStatus{0, SIGKILL}});
  Feed(HostChecked{"127.0.0.3", false, "connection refused"});
  EXPECT_EQ(OnlyLaunch().plan.replicas, 1);
}

TEST_F(ControllerTest, AMachineUnreachableAtStartIsLeftOutUntilItPassesACheck) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=2\n"), {"127.0.0.3"}});
  EXPECT_EQ(OnlyLaunch().plan.replicas, 1);
  RunGeneration(1);
  EXPECT_EQ(controller_->Machines()[1].state, MachineState::kFailed);
  Advance(2);
  ASSERT_EQ(All<CheckHostAction>().size(), 1u);
  Feed(HostChecked{"127.0.0.3", true, ""});
  EXPECT_EQ(SignalsOf(SIGUSR1).size(), 2u);  // it joins through a grow
}

TEST_F(ControllerTest, StatusShowsEachMachine) {
  Feed(StartInput{List("127.0.0.2 slots=2\n127.0.0.3 slots=3\n"), {}});
  const std::vector<MachineView> machines = controller_->Machines();
  ASSERT_EQ(machines.size(), 2u);
  EXPECT_EQ(machines[0].state, MachineState::kInUse);
  EXPECT_EQ(machines[0].used_slots, 2);
  EXPECT_EQ(machines[1].used_slots, 2);  // 5 slots, 2 x 2 uses 4
}

}  // namespace
}  // namespace mitra::manager
