// `mitra status` and `mitra stop` against a real ControlServer started by the test, and the
// real `mitra` binary on a run directory without a manager.
#include "cli/control_command.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <sstream>

#include "common/blocking_queue.h"
#include "manager/status_report.h"
#include "run/control_socket.h"
#include "tests/common/run_helpers.h"

namespace mitra::cli {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

constexpr const char* kStatusAnswer =
    R"({"ok":true,"state":"morphing","reason":"machine list changed: 3 -> 2 machines",)"
    R"("generation":2,"stages":2,"replicas":1,"step":40,"max_steps":100,"loss":3.5,)"
    R"("tokens_per_s":1200,"machines":[{"address":"localhost","slots":2,"state":"in use",)"
    R"("used_slots":2}]})";

class ControlCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directory(RunDir()); }

  std::string RunDir() const { return dir_.Path("run"); }

  // A manager stand-in: answers status with kStatusAnswer and stop with a message, and tells
  // the test which commands arrived.
  void StartManager() {
    server_ = std::make_unique<run::ControlServer>(
        run::ControlSocketPath(RunDir()), [this](const JsonObject& request) -> std::string {
          const std::string command = request.GetString("command").value_or("");
          received_.Push(command);
          if (command == manager::kStatusCommand) return kStatusAnswer;
          if (command == manager::kStopCommand) {
            return R"({"ok":true,"message":"stopping: every worker will checkpoint after the same step"})";
          }
          return R"({"ok":false,"error":"unknown command"})";
        });
    ASSERT_TRUE(server_->Start().ok());
  }

  int Run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return ControlCommand(args, out_, err_);
  }

  testing::TempDir dir_;
  std::unique_ptr<run::ControlServer> server_;
  BlockingQueue<std::string> received_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(ControlCommandTest, StatusPrintsTheManagersAnswer) {
  StartManager();
  ASSERT_EQ(Run({"status", "--run-dir", RunDir()}), 0) << err_.str();
  EXPECT_EQ(received_.TryPop(), "status");
  const std::string text = out_.str();
  EXPECT_TRUE(Contains(text, "morphing: generation 2, shape 2 x 1 (2 stages x 1 replica)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "  reason      machine list changed: 3 -> 2 machines\n")) << text;
  EXPECT_TRUE(Contains(text, "  step        40 / 100\n")) << text;
  EXPECT_TRUE(Contains(text, "    localhost  2 slots  in use\n")) << text;
}

TEST_F(ControlCommandTest, StatusJsonPrintsTheAnswerAsOneLine) {
  StartManager();
  ASSERT_EQ(Run({"status", "--run-dir", RunDir(), "--json"}), 0) << err_.str();
  Result<JsonObject> printed = JsonObject::Parse(out_.str());
  ASSERT_TRUE(printed.ok()) << out_.str();
  EXPECT_EQ(printed->GetString("state"), "morphing");
  EXPECT_EQ(printed->GetNumber("step"), 40);
}

TEST_F(ControlCommandTest, StopPrintsWhatTheManagerDoes) {
  StartManager();
  ASSERT_EQ(Run({"stop", "--run-dir", RunDir()}), 0) << err_.str();
  EXPECT_EQ(received_.TryPop(), "stop");
  EXPECT_EQ(out_.str(),
            "mitra stop: stopping: every worker will checkpoint after the same step\n");
}

TEST_F(ControlCommandTest, DrainSendsTheMachineAndPrintsTheAnswer) {
  server_ = std::make_unique<run::ControlServer>(
      run::ControlSocketPath(RunDir()), [this](const JsonObject& request) -> std::string {
        received_.Push(request.GetString("command").value_or("") + " " +
                       request.GetString("machine").value_or(""));
        if (request.GetString("machine") == "127.0.0.9") {
          return R"({"ok":false,"error":"no machine of the list is 127.0.0.9"})";
        }
        return R"({"ok":true,"message":"draining 127.0.0.3: the job moves off it"})";
      });
  ASSERT_TRUE(server_->Start().ok());
  ASSERT_EQ(Run({"drain", "--run-dir", RunDir(), "127.0.0.3"}), 0) << err_.str();
  EXPECT_EQ(received_.TryPop(), "drain 127.0.0.3");
  EXPECT_EQ(out_.str(), "mitra drain: draining 127.0.0.3: the job moves off it\n");
  EXPECT_EQ(Run({"drain", "--run-dir", RunDir(), "127.0.0.9"}), 1);
  EXPECT_TRUE(Contains(err_.str(), "the manager answered: no machine of the list is 127.0.0.9"))
      << err_.str();
  EXPECT_EQ(Run({"drain", "--run-dir", RunDir()}), 2);
  EXPECT_TRUE(Contains(err_.str(), "which machine?")) << err_.str();
}

TEST_F(ControlCommandTest, StopWaitReturnsOnceTheManagerHasExited) {
  StartManager();
  std::future<int> stop = std::async(std::launch::async, [this] {
    return ControlCommand({"stop", "--run-dir", RunDir(), "--wait", "--timeout", "10"}, out_,
                          err_);
  });
  ASSERT_EQ(received_.PopFor(std::chrono::seconds(5)), "stop");
  EXPECT_EQ(stop.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "mitra stop --wait returned while the manager still runs";
  server_->Stop();  // the manager exits
  ASSERT_EQ(stop.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(stop.get(), 0) << err_.str();
  EXPECT_TRUE(Contains(out_.str(), "mitra stop: the manager has exited\n")) << out_.str();
}

TEST_F(ControlCommandTest, StopWaitGivesUpAfterItsTimeout) {
  StartManager();
  EXPECT_EQ(Run({"stop", "--run-dir", RunDir(), "--wait", "--timeout", "0.3"}), 1);
  EXPECT_TRUE(Contains(err_.str(), "is still running after 0.3 s; `mitra status --run-dir"))
      << err_.str();
}

TEST_F(ControlCommandTest, AnErrorAnswerFailsTheCommand) {
  server_ = std::make_unique<run::ControlServer>(run::ControlSocketPath(RunDir()), [](const JsonObject&) {
    return std::string(R"({"ok":false,"error":"already stopping"})");
  });
  ASSERT_TRUE(server_->Start().ok());
  EXPECT_EQ(Run({"stop", "--run-dir", RunDir()}), 1);
  EXPECT_EQ(err_.str(), "mitra stop: the manager answered: already stopping\n");
  EXPECT_EQ(Run({"status", "--run-dir", RunDir()}), 1);
  EXPECT_EQ(err_.str(), "mitra status: the manager answered: already stopping\n");
}

TEST_F(ControlCommandTest, StopWithoutAManagerSaysSo) {
  EXPECT_EQ(Run({"stop", "--run-dir", RunDir()}), 1);
  EXPECT_TRUE(Contains(err_.str(), "mitra stop: no manager is running on " + RunDir()))
      << err_.str();
}

TEST_F(ControlCommandTest, StatusWithoutAManagerOrStateSaysNoRunStartedHere) {
  EXPECT_EQ(Run({"status", "--run-dir", RunDir()}), 1);
  EXPECT_TRUE(Contains(err_.str(), "state.json does not exist either, so no run has started"))
      << err_.str();
  EXPECT_EQ(Run({"status", "--run-dir", dir_.Path("nowhere")}), 1);
  EXPECT_TRUE(Contains(err_.str(), "is not a run directory")) << err_.str();
}

TEST_F(ControlCommandTest, BadUsageExitsTwo) {
  EXPECT_EQ(Run({"status", "--bogus"}), 2);
  EXPECT_EQ(err_.str(), "mitra status: unknown flag '--bogus'; see `mitra status --help`\n");
}

// ---- the real binary -----------------------------------------------------------------------

TEST_F(ControlCommandTest, MitraStatusWithoutAManagerShowsTheRecordedState) {
  dir_.Write("run/state.json",
             "{\n  \"state\": \"running\",\n  \"manager_pid\": 999999999,\n"
             "  \"generation\": 1,\n  \"stages\": 2,\n  \"replicas\": 2,\n  \"step\": 17,\n"
             "  \"max_steps\": 50,\n  \"loss\": 2.5,\n  \"tokens_per_s\": 800\n}\n");
  const testing::MitraResult r =
      testing::RunProgram(MITRA_BINARY, {"status", "--run-dir", "run"}, dir_.path(), 10);
  EXPECT_EQ(r.exit_code, 1) << r.output();
  EXPECT_TRUE(Contains(r.out, "mitra status: no manager is running on run; last recorded "
                              "state, from run/state.json:\n"))
      << r.output();
  EXPECT_TRUE(Contains(r.out, "running: generation 1, shape 2 x 2")) << r.output();
  EXPECT_TRUE(Contains(r.out, "  step        17 / 50\n")) << r.output();

  const testing::MitraResult stop =
      testing::RunProgram(MITRA_BINARY, {"stop", "--run-dir", "run"}, dir_.path(), 10);
  EXPECT_EQ(stop.exit_code, 1) << stop.output();
  EXPECT_TRUE(Contains(stop.err, "mitra stop: no manager is running on run (")) << stop.output();
}

TEST_F(ControlCommandTest, MitraStatusTalksToARunningManager) {
  StartManager();
  const testing::MitraResult r =
      testing::RunProgram(MITRA_BINARY, {"status", "--run-dir", "run"}, dir_.path(), 10);
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_TRUE(Contains(r.out, "morphing: generation 2")) << r.output();

  const testing::MitraResult help =
      testing::RunProgram(MITRA_BINARY, {"status", "--help"}, dir_.path(), 10);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out, StatusUsage());
}

}  // namespace
}  // namespace mitra::cli
