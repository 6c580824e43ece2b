// The supervisor's decisions, with a scripted runner, an in-memory file system and a manual
// clock: no processes, no sleeping.
#include "manager/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <sstream>

#include "common/strings.h"
#include "tests/common/memory_file_system.h"
#include "tests/launcher/scripted_process_runner.h"

namespace mitra::manager {
namespace {

using testing::ScriptedProcessRunner;
using Outcome = SupervisorResult::Outcome;

constexpr const char* kRunDir = "/run";

std::string StepJson(int step) {
  return R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":)" +
         std::to_string(10.0 / step) + R"(,"samples":8,"tokens_per_s":1000,"step_time_s":0.5})";
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs_.CreateDirectories(std::string(kRunDir) + "/logs/gen-0").ok());
    Result<std::unique_ptr<RunJournal>> journal = RunJournal::Open(&fs_, &clock_, run_dir_);
    ASSERT_TRUE(journal.ok());
    journal_ = std::move(journal).value();
  }

  // A 2 x 2 job.
  Job MakeJob() {
    GridRequest request;
    request.slots_per_machine = {4};
    request.stages = 2;
    request.segments = 4;
    request.global_batch = 8;
    Job job;
    job.plan = *PlanGrid(request);
    for (int rank = 0; rank < job.plan.world_size(); ++rank) {
      launcher::ProcessSpec spec;
      spec.program = "/bin/train";
      spec.log_path = run_dir_.LogPath(0, rank);
      job.specs.push_back(spec);
    }
    job.state_fields.SetInt("manager_pid", 42);
    return job;
  }

  SupervisorResult Run(SupervisorOptions options = {}) {
    options.max_steps = options.max_steps ? options.max_steps : 3;
    Supervisor supervisor(MakeJob(), options, &runner_, &clock_, journal_.get(), &queue_, &out_,
                          &err_);
    return supervisor.Run();
  }

  std::vector<JsonObject> Lines(const std::string& name) {
    std::vector<JsonObject> records;
    const std::string text = fs_.Contents(std::string(kRunDir) + "/" + name);
    for (std::string_view line : SplitLines(text)) {
      Result<JsonObject> parsed = JsonObject::Parse(line);
      EXPECT_TRUE(parsed.ok()) << line;
      if (parsed.ok()) records.push_back(*parsed);
    }
    return records;
  }

  std::vector<std::string> EventNames() {
    std::vector<std::string> names;
    for (const JsonObject& r : Lines("events.jsonl")) names.push_back(*r.GetString("event"));
    return names;
  }

  std::optional<std::string> State() {
    Result<JsonObject> state =
        JsonObject::Parse(fs_.Contents(std::string(kRunDir) + "/state.json"));
    if (!state.ok()) return std::nullopt;
    return state->GetString("state");
  }

  // Every rank reports ready; rank 0 reports steps 1..`steps`; all stop and exit 0.
  static void CleanRun(ScriptedProcessRunner& r, int index, int steps) {
    r.Message(index, R"({"event":"ready","rank":)" + std::to_string(index) + "}");
    if (index == 0) {
      for (int s = 1; s <= steps; ++s) r.Message(0, StepJson(s));
    }
    r.Message(index, R"({"event":"stopped","step":3,"reason":"max_steps"})");
    r.Exit(index, 0);
  }

  testing::MemoryFileSystem fs_;
  ManualClock clock_;
  RunDir run_dir_{kRunDir};
  std::unique_ptr<RunJournal> journal_;
  EventQueue queue_;
  ScriptedProcessRunner runner_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(SupervisorTest, CleanRunRecordsEveryStepAndEndsDone) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) { CleanRun(r, index, 3); };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kDone);
  EXPECT_EQ(result.last_step, 3);
  EXPECT_TRUE(runner_.signals.empty());

  const std::vector<JsonObject> metrics = Lines("metrics.jsonl");
  ASSERT_EQ(metrics.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(metrics[i].GetNumber("step"), i + 1);
    EXPECT_EQ(metrics[i].GetNumber("time"), clock_.WallSeconds());
    EXPECT_EQ(metrics[i].GetNumber("stages"), 2);  // filled in: the worker did not say
    EXPECT_EQ(metrics[i].GetNumber("replicas"), 2);
    EXPECT_EQ(metrics[i].GetNumber("generation"), 0);
    EXPECT_FALSE(metrics[i].Has("event"));
  }
  // Each scripted rank says ready and exits before the next starts: the job is "ready"
  // when the last rank is, just before its exit.
  EXPECT_EQ(EventNames(),
            (std::vector<std::string>{"launch", "worker_exit", "worker_exit", "worker_exit",
                                      "ready", "worker_exit", "done"}));
  const JsonObject launch = Lines("events.jsonl")[0];
  EXPECT_EQ(launch.Find("pids")->string_value(), "[1000,1001,1002,1003]");
  EXPECT_EQ(launch.GetString("stage_to_rank_map"), "0,2;1,3;");
  EXPECT_EQ(State(), "done");
  EXPECT_NE(out_.str().find("step 3/3  loss 3.3333  1,000 tokens/s  0.50 s/step"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("mitra: done: 3 steps in 0:00, final loss 3.3333, mean 1,000 "
                            "tokens/s"),
            std::string::npos)
      << out_.str();
}

TEST_F(SupervisorTest, AFailingRankStopsTheOthersAndShowsItsLastLines) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"ready"})");
    if (index == 0) r.Message(0, StepJson(1));
    if (index == 1) r.Exit(1, 7, 0, {"loading", "fatal: out of memory"});
  };
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("rank 1 (pid 1001) exited with code 7 after step 1"),
            std::string::npos)
      << result.reason;
  EXPECT_NE(result.reason.find("logs/gen-0/rank-1.log"), std::string::npos);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 3);
  for (const auto& [index, s] : runner_.signals) EXPECT_NE(index, 1);
  EXPECT_EQ(runner_.SignalCount(SIGKILL), 0);
  EXPECT_NE(err_.str().find("mitra: last 2 lines of logs/gen-0/rank-1.log:\n  | loading\n  | "
                            "fatal: out of memory\n"),
            std::string::npos)
      << err_.str();
  const std::vector<std::string> names = EventNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "failure"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "terminate"), names.end());
  EXPECT_EQ(names.back(), "failed");
  EXPECT_EQ(State(), "failed");
}

TEST_F(SupervisorTest, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    if (index == 3) r.Exit(3, 0, SIGSEGV);
  };
  runner_.on_signal = [this](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGTERM) clock_.Advance(1);  // ignored; time passes
    if (s == SIGKILL) r.Exit(index, 0, SIGKILL);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("rank 3 (pid 1003) was killed by signal SIGSEGV"),
            std::string::npos);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 3);
  EXPECT_EQ(runner_.SignalCount(SIGKILL), 3);
}

TEST_F(SupervisorTest, SigintStopsEveryWorkerAfterTheCurrentStep) {
  runner_.on_start = [this](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"ready"})");
    if (index == 0) r.Message(0, StepJson(1));
    if (index == 3) queue_.Push(StopRequested{SIGINT});
  };
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s != SIGUSR1) return;
    if (index == 0) r.Message(0, StepJson(2));
    r.Message(index, R"({"event":"stopped","step":2,"reason":"signal"})");
    r.Exit(index, 0);
  };
  const SupervisorResult result = Run({});
  EXPECT_EQ(result.outcome, Outcome::kStopped);
  EXPECT_EQ(result.last_step, 2);
  EXPECT_EQ(runner_.SignalCount(SIGUSR1), 4);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 0);
  EXPECT_NE(out_.str().find("mitra: SIGINT: asking 4 workers to stop after the current step"),
            std::string::npos);
  EXPECT_NE(out_.str().find("mitra: stopped at step 2 on request"), std::string::npos)
      << out_.str();
  EXPECT_EQ(State(), "stopped");
  EXPECT_EQ(EventNames().back(), "stopped");
}

TEST_F(SupervisorTest, AStopThatTakesTooLongEndsInKill) {
  runner_.on_start = [this](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"ready"})");
    if (index == 3) queue_.Push(StopRequested{SIGTERM});
  };
  runner_.on_signal = [this](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGUSR1) clock_.Advance(30);  // the workers hang; 4 x 30 s > 60 s
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run({});
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("did not stop within 60 s"), std::string::npos) << result.reason;
  EXPECT_EQ(runner_.SignalCount(SIGUSR1), 4);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 4);
}

TEST_F(SupervisorTest, ASecondSignalKillsAtOnce) {
  runner_.on_start = [this](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"ready"})");
    if (index == 3) queue_.Push(StopRequested{SIGINT});
  };
  runner_.on_signal = [this](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGUSR1 && index == 3) queue_.Push(StopRequested{SIGINT});
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run({});
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("second SIGINT"), std::string::npos) << result.reason;
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 4);
}

TEST_F(SupervisorTest, AStopBeforeAllWorkersAreReadyTerminatesThem) {
  // SIGUSR1 would kill a worker that has not installed its handler yet: SIGTERM instead.
  runner_.on_start = [this](ScriptedProcessRunner& r, int index) {
    if (index < 2) r.Message(index, R"({"event":"ready"})");
    if (index == 3) queue_.Push(StopRequested{SIGINT});
  };
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kStopped);
  EXPECT_EQ(runner_.SignalCount(SIGUSR1), 0);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 4);
  EXPECT_NE(out_.str().find("SIGINT before all workers were ready"), std::string::npos);
}

TEST_F(SupervisorTest, AWorkerKilledBySigusr1IsToldToInstallAHandler) {
  runner_.on_start = [this](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"ready"})");
    if (index == 3) queue_.Push(StopRequested{SIGINT});
  };
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGUSR1) r.Exit(index, 0, index == 2 ? SIGUSR1 : 0);
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("had no SIGUSR1 handler"), std::string::npos) << result.reason;
}

TEST_F(SupervisorTest, ALaunchFailureStopsWhatWasStarted) {
  runner_.fail_start_at = 2;
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("rank 2 could not be started"), std::string::npos);
  EXPECT_EQ(runner_.processes.size(), 2u);
  EXPECT_EQ(runner_.SignalCount(SIGTERM), 2);
}

TEST_F(SupervisorTest, RanksThatOutliveACleanExitTooLongAreAFailure) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    if (index == 0) r.Exit(0, 0);
  };
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGTERM) r.Exit(index, 0, SIGTERM);
  };
  SupervisorOptions options;
  options.finish_timeout_s = 0;
  const SupervisorResult result = Run(options);
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  EXPECT_NE(result.reason.find("rank(s) 1, 2, 3 still running"), std::string::npos)
      << result.reason;
}

TEST_F(SupervisorTest, MalformedMessagesAreRecordedAndIgnored) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    if (index == 0) r.Message(0, "not json");
    if (index == 0) r.Message(0, R"({"event":"step","step":"x"})");
    CleanRun(r, index, 1);
  };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kDone);
  const std::vector<std::string> names = EventNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "bad_message"), 2);
  EXPECT_EQ(Lines("metrics.jsonl").size(), 1u);
}

TEST_F(SupervisorTest, AnUnwritableRunDirectoryIsAWarningNotAFailure) {
  fs_.set_fail_writes(true);
  runner_.on_start = [](ScriptedProcessRunner& r, int index) { CleanRun(r, index, 2); };
  const SupervisorResult result = Run();
  EXPECT_EQ(result.outcome, Outcome::kDone);
  const std::string err = err_.str();
  EXPECT_NE(err.find("warning: cannot write the run directory"), std::string::npos);
  EXPECT_EQ(err.find("warning", err.find("warning") + 1), std::string::npos);  // said once
}

}  // namespace
}  // namespace mitra::manager
