// RunLoop with a real Controller, driven through fake transports on a manual clock and an
// in-memory file system: no process, socket, thread or sleep. Each test runs a job of
// simulated seconds to its end and reads what the loop wrote.
#include "run/run_loop.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "contract/exit_codes.h"
#include "manager/status_report.h"
#include "contract/variables.h"
#include "tests/common/memory_file_system.h"
#include "tests/manager/machine_lists.h"
#include "tests/run/fake_transports.h"

namespace mitra::run {
namespace {

using testing::FakeTransports;
using testing::FakeWorkerScript;
using testing::List;
using testing::MemoryFileSystem;

class RunLoopTest : public ::testing::Test {
 protected:
  RunLoopTest() : fake_(&clock_, &queue_) {
    EXPECT_TRUE(run_dir_.Create(fs_, 0).ok());
    Result<std::unique_ptr<RunJournal>> journal = RunJournal::Open(&fs_, &clock_, run_dir_);
    EXPECT_TRUE(journal.ok()) << journal.status().message();
    if (journal.ok()) journal_ = std::move(*journal);
    fake_.set_time_limit(clock_.MonotonicSeconds() + 600);
  }

  manager::ControllerOptions Controller(int64_t max_steps) {
    manager::ControllerOptions o;
    o.stages = 1;
    o.segments = 2;
    o.global_batch = 16;
    o.max_steps = max_steps;
    return o;
  }

  // The loop for a job of `max_steps` steps, its seams on the fake.
  std::unique_ptr<RunLoop> MakeLoop(manager::ControllerOptions controller) {
    RunLoopOptions options;
    options.worker = WorkerProgram::Make("/opt/job/train", {"--fast"}, {}, {}, "/opt/job", "");
    options.machines_path = "machines.txt";
    options.settings.placement.run_dir = run_dir_.path();
    options.settings.placement.checkpoint_dir = "/runs/job/checkpoints";
    options.settings.placement.max_steps = controller.max_steps;
    options.settings.placement.checkpoint_every = 2;
    fake_.Attach(&options);
    return std::make_unique<RunLoop>(std::move(options), controller, &fake_, &fs_, &clock_,
                                     &run_dir_, journal_.get(), &queue_, &out_, &err_);
  }

  // Runs `loop` on `machines` to its end; returns the exit code of `mitra run`.
  int Run(RunLoop& loop, const std::string& machines) {
    const int code = loop.Run(List(machines));
    EXPECT_FALSE(fake_.timed_out()) << "the job did not end in simulated time\n" << out_.str()
                                    << err_.str();
    return code;
  }

  // Schedules an edit of the machine list at `time` seconds into the job.
  void EditListAt(double time, const std::string& contents) {
    fake_.At(start_ + time, [this, contents] { queue_.Push(MachineListEdited{contents}); });
  }

  std::vector<JsonObject> Records(const std::string& path) const {
    std::vector<JsonObject> records;
    const std::string contents = fs_.Contents(path);
    for (const std::string_view line : SplitLines(contents)) {
      if (line.empty()) continue;
      Result<JsonObject> record = JsonObject::Parse(line);
      EXPECT_TRUE(record.ok()) << line;
      if (record.ok()) records.push_back(*record);
    }
    return records;
  }
  std::vector<JsonObject> Events(const std::string& name) const {
    std::vector<JsonObject> out;
    for (const JsonObject& e : Records(run_dir_.EventsPath())) {
      if (e.GetString("event") == name) out.push_back(e);
    }
    return out;
  }
  // The world size of every launch, in order.
  std::vector<int> LaunchedWorlds() const {
    std::vector<int> worlds;
    for (const JsonObject& launch : Events("launch")) {
      worlds.push_back(static_cast<int>(launch.GetNumber("world_size").value_or(-1)));
    }
    return worlds;
  }

  ManualClock clock_;
  const double start_ = clock_.MonotonicSeconds();
  MemoryFileSystem fs_;
  EventQueue queue_;
  FakeTransports fake_;
  RunDir run_dir_{"/runs/job"};
  std::unique_ptr<RunJournal> journal_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(RunLoopTest, RunsAJobToCompletionAndWritesItsRecords) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(4));
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0);

  EXPECT_NE(out_.str().find("mitra: done: 4 steps"), std::string::npos) << out_.str();
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2}));
  EXPECT_EQ(Events("ready").size(), 1u);
  EXPECT_EQ(Events("worker_exit").size(), 2u);
  ASSERT_EQ(Events("done").size(), 1u);
  EXPECT_EQ(Events("done")[0].GetNumber("step"), 4);

  // metrics.jsonl: rank 0's step records, timed, with the shape filled in.
  const std::vector<JsonObject> metrics = Records(run_dir_.MetricsPath());
  ASSERT_EQ(metrics.size(), 4u);
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i].GetNumber("step"), static_cast<double>(i + 1));
    EXPECT_EQ(metrics[i].GetNumber("replicas"), 2);
    EXPECT_TRUE(metrics[i].Has("time"));
    EXPECT_FALSE(metrics[i].Has("event"));
  }
  Result<JsonObject> state = JsonObject::Parse(fs_.Contents(run_dir_.StatePath()));
  ASSERT_TRUE(state.ok()) << fs_.Contents(run_dir_.StatePath());
  EXPECT_EQ(state->GetString("state"), "done");
  EXPECT_EQ(state->GetNumber("step"), 4);

  // rank_steps.jsonl: each rank's heartbeats that followed steps, with their times.
  const std::vector<JsonObject> times = Records(run_dir_.RankStepsPath());
  ASSERT_FALSE(times.empty());
  int steps[2] = {0, 0};
  for (const JsonObject& t : times) {
    const int rank = static_cast<int>(t.GetNumber("rank").value_or(-1));
    ASSERT_TRUE(rank == 0 || rank == 1) << t.ToJson();
    steps[rank] += static_cast<int>(t.GetNumber("steps").value_or(0));
    EXPECT_EQ(t.GetNumber("stage"), 0);
    EXPECT_NEAR(t.GetNumber("compute_s").value_or(0), 0.8, 1e-9);
    EXPECT_NEAR(t.GetNumber("wait_s").value_or(0), 0.2, 1e-9);
  }
  // The last step's heartbeat may not come before the worker exits.
  EXPECT_GE(steps[0], 3);
  EXPECT_LE(steps[0], 4);
  EXPECT_TRUE(Events("straggler").empty());
}

TEST_F(RunLoopTest, GivesEachRankItsPlaceAndALocalRendezvousItsPickedPort) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(2));
  EXPECT_EQ(Run(*loop, "localhost slots=2\n"), 0);

  const auto environments = fake_.Environments();
  ASSERT_EQ(environments.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& env = environments[rank];
    EXPECT_EQ(env.at(contract::kRank), std::to_string(rank));
    EXPECT_EQ(env.at(contract::kWorldSize), "2");
    EXPECT_EQ(env.at(contract::kRdzvHost), "127.0.0.1");
    EXPECT_EQ(env.at(contract::kRdzvPort), "29400");  // the fake's port picker
    EXPECT_EQ(env.at(contract::kRunDir), "/runs/job");
  }
}

TEST_F(RunLoopTest, GrowsAndShrinksWhenTheMachineListChanges) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(20));
  EditListAt(4.2, "node1 slots=2\nnode2 slots=2\n");  // grow: 1 x 2 -> 1 x 4
  EditListAt(10.2, "node2 slots=1\n");                // shrink: node1 leaves
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0) << err_.str();

  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 4, 1}));
  EXPECT_EQ(Events("morph").size(), 2u);
  // Each morph resumes from the checkpoint every rank stopped after: no step is lost.
  const std::vector<JsonObject> launches = Events("launch");
  EXPECT_GT(launches[1].GetNumber("resume_step").value_or(0), 0);
  EXPECT_GT(launches[2].GetNumber("resume_step").value_or(0),
            launches[1].GetNumber("resume_step").value_or(0));
  EXPECT_TRUE(Events("step_lost").empty());
  EXPECT_EQ(Events("done").size(), 1u);
  // The new machine was health-checked before the grow.
  EXPECT_GE(fake_.checks(), 1);
  // Every rank of the old generations got SIGUSR1 and nothing harsher.
  int usr1 = 0;
  for (const auto& [rank, signal_number] : fake_.signals()) {
    EXPECT_EQ(signal_number, SIGUSR1) << "rank " << rank;
    usr1 += signal_number == SIGUSR1;
  }
  EXPECT_EQ(usr1, 2 + 4);
}

TEST_F(RunLoopTest, RecoversFromACrashedRankAndShowsItsOwnWords) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(8));
  fake_.At(start_ + 3.7, [this] {
    fake_.Crash(1, 7, {"@mitra {\"event\":\"heartbeat\",\"rank\":1}", "fatal: out of memory",
                       "@mitra {\"rank\":1,\"event\":\"heartbeat\"}"});
  });
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0) << err_.str();

  ASSERT_EQ(Events("failure").size(), 1u);
  EXPECT_EQ(Events("failure")[0].GetNumber("rank"), 1);
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 2}));
  EXPECT_EQ(Events("done").size(), 1u);
  // The report quotes the rank's last lines without its heartbeat records, however written.
  EXPECT_NE(err_.str().find("fatal: out of memory"), std::string::npos) << err_.str();
  EXPECT_EQ(err_.str().find("heartbeat"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("logs/gen-0/rank-1.log"), std::string::npos) << err_.str();
}

TEST_F(RunLoopTest, AWorkerThatExitsTwoBeforeTheFirstStepEndsTheJobWithItsMessage) {
  FakeWorkerScript script;
  script.fail_rank = 1;
  script.fail_exit_code = kExitBadInput;
  script.fail_lines = {"[2025-01-01 12:00:00.000] [error] rank 1: unknown schedule 'zb-x' "
                       "(expected gpipe, 1f1b or varuna)"};
  fake_.SetScript(script);
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(8));
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), kExitBadInput) << err_.str();

  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2})) << "one generation: nothing relaunched";
  ASSERT_EQ(Events("failure").size(), 1u);
  EXPECT_EQ(Events("failure")[0].GetNumber("rank"), 1);
  ASSERT_EQ(Events("failed").size(), 1u);
  EXPECT_NE(Events("failed")[0].GetString("reason").value_or("").find("unknown schedule 'zb-x'"),
            std::string::npos);
  // The worker's words, quoted, and in the last line.
  EXPECT_NE(err_.str().find("  | [2025-01-01 12:00:00.000] [error] rank 1: unknown schedule"),
            std::string::npos)
      << err_.str();
  EXPECT_NE(err_.str().find("exited with code 2: rank 1: unknown schedule 'zb-x' (expected "
                            "gpipe, 1f1b or varuna) (exit code 2: the program's configuration "
                            "is wrong"),
            std::string::npos)
      << err_.str();
  EXPECT_EQ(fake_.running(), 0);
}

TEST_F(RunLoopTest, AWorkerThatExitsTwoAfterTheFirstStepIsRecoveredAsAnyFailure) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(8));
  fake_.At(start_ + 3.7, [this] { fake_.Crash(1, kExitBadInput, {"bad placement line"}); });
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0) << err_.str();
  EXPECT_EQ(Events("failure").size(), 1u);
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 2}));
  EXPECT_EQ(Events("done").size(), 1u);
}

TEST_F(RunLoopTest, AProgramThatCrashesTheSameWayAtEveryStartIsLaunchedTwiceOnly) {
  FakeWorkerScript script;
  script.fail_rank = 0;
  script.fail_after_s = 0.8;  // after `ready`, before the first step
  script.fail_exit_code = 134;
  script.fail_lines = {"terminate called after throwing an instance of 'c10::Error'",
                       "  what():  \"addmm_impl_cpu_\" not implemented for 'BFloat16'",
                       "frame #0: c10::Error::Error(c10::SourceLocation, std::string)"};
  fake_.SetScript(script);
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(8));
  // On this machine, not one the job could go on without: the program is to blame.
  EXPECT_EQ(Run(*loop, "localhost slots=2\n"), kExitFailed) << err_.str();

  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 2})) << "not --max-restarts (5) times";
  EXPECT_EQ(Events("failure").size(), 2u);
  EXPECT_NE(err_.str().find("exited with code 134: \"addmm_impl_cpu_\" not implemented for "
                            "'BFloat16' (before the first step, as in the launch before"),
            std::string::npos)
      << err_.str();
  EXPECT_EQ(fake_.running(), 0);
}

TEST_F(RunLoopTest, LeavesOutALostMachineUntilItsHealthCheckPasses) {
  manager::ControllerOptions controller = Controller(30);
  controller.backoff_base_s = 5;
  std::unique_ptr<RunLoop> loop = MakeLoop(controller);
  fake_.At(start_ + 3.5, [this] { fake_.LoseMachine("node2"); });
  fake_.At(start_ + 9, [this] { fake_.SetHealthy("node2", true); });
  EXPECT_EQ(Run(*loop, "node1 slots=1\nnode2 slots=1\n"), 0) << err_.str();

  // 1 x 2, then 1 x 1 without node2 (its check failed), then 1 x 2 once a retry passed.
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 1, 2}));
  ASSERT_GE(Events("host_failed").size(), 1u);
  EXPECT_EQ(Events("host_failed")[0].GetString("machine"), "node2");
  EXPECT_EQ(Events("host_healthy").size(), 1u);
  const std::vector<JsonObject> exits = Events("worker_exit");
  ASSERT_FALSE(exits.empty());
  ASSERT_NE(exits[0].Find("lost"), nullptr);
  EXPECT_EQ(exits[0].Find("lost")->ToJson(), "true");
}

TEST_F(RunLoopTest, ARankThatCannotBeStartedIsAFailureOfItsMachine) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(4));
  fake_.FailStarts("node2", 1);
  EXPECT_EQ(Run(*loop, "node1 slots=1\nnode2 slots=1\n"), 0) << err_.str();

  ASSERT_EQ(Events("failure").size(), 1u);
  EXPECT_EQ(Events("failure")[0].GetNumber("rank"), 1);
  EXPECT_NE(err_.str().find("rank 1 could not be started on node2"), std::string::npos)
      << err_.str();
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2, 2}));  // the check passes: node2 is kept
  EXPECT_EQ(Events("done").size(), 1u);
  EXPECT_EQ(fake_.running(), 0);
}

TEST_F(RunLoopTest, AHungRankIsKilledAndTheJobGoesOn) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(10));
  fake_.At(start_ + 3.2, [this] { fake_.Hang(1); });
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0) << err_.str();

  ASSERT_EQ(Events("failure").size(), 1u);
  EXPECT_NE(Events("failure")[0].GetString("reason").value_or("").find("hung"),
            std::string::npos);
  bool killed = false;
  for (const auto& [rank, signal_number] : fake_.signals()) {
    killed |= rank == 1 && signal_number == SIGKILL;
  }
  EXPECT_TRUE(killed);
  EXPECT_EQ(Events("done").size(), 1u);
  EXPECT_EQ(fake_.running(), 0);
}

TEST_F(RunLoopTest, KeepsTheListInForceWhenAnEditDoesNotParse) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(6));
  EditListAt(2.5, "node 1 slots=2\n");
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0);

  EXPECT_EQ(Events("machines_rejected").size(), 1u);
  EXPECT_NE(err_.str().find("machines.txt:1:"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("the previous list stays in force"), std::string::npos);
  EXPECT_EQ(LaunchedWorlds(), std::vector<int>({2}));
}

TEST_F(RunLoopTest, StopsOnRequestAfterACheckpoint) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(100));
  fake_.At(start_ + 5.3, [this] { queue_.Push(StopRequested{0}); });
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0);

  EXPECT_EQ(Events("stopped").size(), 1u);
  EXPECT_NE(out_.str().find("mitra: stopped at step"), std::string::npos) << out_.str();
  EXPECT_GT(fake_.checkpoint_step(), 0);
  EXPECT_EQ(fake_.running(), 0);
}

TEST_F(RunLoopTest, ServesTheStatusOfTheLastEventHandled) {
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(10));
  std::optional<manager::StatusReport> seen;
  fake_.At(start_ + 4.6, [&] { seen = manager::StatusReport::FromJson(loop->Status()); });
  EXPECT_EQ(Run(*loop, "node1 slots=2\nnode2 slots=1\n"), 0);

  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->state, "running");
  EXPECT_EQ(seen->generation, 0);
  EXPECT_EQ(seen->stages, 1);
  EXPECT_EQ(seen->replicas, 3);
  EXPECT_EQ(seen->step, 4);
  EXPECT_EQ(seen->max_steps, 10);
  EXPECT_TRUE(seen->loss);
  ASSERT_EQ(seen->machines.size(), 2u);
  EXPECT_EQ(seen->machines[0].address, "node1");
  EXPECT_EQ(seen->machines[0].state, "in use");
  EXPECT_EQ(seen->machines[0].used_slots, 2);
  ASSERT_TRUE(seen->last_event);
  EXPECT_TRUE(seen->last_event->Has("event"));
  // The elapsed time is as of the last event, however quiet it was.
  ASSERT_TRUE(seen->elapsed_s);
  EXPECT_GT(*seen->elapsed_s, 4.0);
}

// What is no message is recorded as bad_message and changes nothing; a kind of a newer worker
// is let be; a null loss reaches metrics.jsonl as null, in its place.
TEST_F(RunLoopTest, LinesThatAreNoMessagesAreRecordedAndTheJobGoesOn) {
  fake_.At(start_ + 2.2, [this] {
    fake_.Say(0, R"({"event":"step","step":0,"loss":1})");
    fake_.Say(1, R"({"event":"step",)");
    fake_.Say(1, R"({"event":"gpu_clock","mhz":1980})");
  });
  fake_.At(start_ + 2.3, [this] { fake_.Say(0, R"({"event":"step","step":2,"loss":null})"); });
  std::unique_ptr<RunLoop> loop = MakeLoop(Controller(4));
  EXPECT_EQ(Run(*loop, "node1 slots=2\n"), 0);
  EXPECT_NE(out_.str().find("mitra: done: 4 steps"), std::string::npos) << out_.str();
  const std::vector<JsonObject> bad = Events("bad_message");
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].GetNumber("rank"), 0);
  EXPECT_EQ(bad[0].GetString("error"),
            "a `step` record's \"step\" must be a whole number from 1 to 9000000000000000");
  EXPECT_EQ(bad[1].GetNumber("rank"), 1);
  bool null_loss = false;
  for (const JsonObject& m : Records(run_dir_.MetricsPath())) {
    if (m.Find("loss") != nullptr && m.Find("loss")->is_null()) {
      null_loss = true;
      EXPECT_EQ(m.fields()[1].first, "loss") << m.ToJson();
    }
  }
  EXPECT_TRUE(null_loss);
}

}  // namespace
}  // namespace mitra::run
