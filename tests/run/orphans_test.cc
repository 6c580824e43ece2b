// A manager started on the run directory of one that died stops the workers it left, through
// the transports, and only while the previous run had not ended.
#include "run/orphans.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tests/common/memory_file_system.h"

namespace mitra::run {
namespace {

// Records every KillOrphan; a machine named "down" cannot be reached.
class RecordingTransports : public Transports {
 public:
  Result<launcher::ProcessRunner*> RunnerFor(const manager::Machine&) override {
    return Status::Unavailable("not in this test");
  }
  Status Check(const manager::Machine&, double) override { return Status::Ok(); }
  Status KillOrphan(const manager::Machine& machine, int64_t pid, const std::string& run_dir) override {
    killed.push_back(machine.Address() + " " + std::to_string(pid) + " " + run_dir);
    if (machine.host == "down") return Status::Unavailable("cannot connect to down");
    return Status::Ok();
  }
  std::string WorkerAddress(const manager::Machine& machine) const override { return machine.host; }

  std::vector<std::string> killed;
};

class OrphansTest : public ::testing::Test {
 protected:
  int Kill(const std::string& state) {
    fs_.AddFile("/run/state.json", state);
    return KillOrphans(fs_, RunDir("/run"), transports_, out_);
  }
  testing::MemoryFileSystem fs_;
  RecordingTransports transports_;
  std::ostringstream out_;
};

TEST_F(OrphansTest, TheWorkersOfARunThatHadNotEndedAreStopped) {
  EXPECT_EQ(Kill(R"({"state":"morphing","workers":{"0":"localhost 101","1":"alice@node2:2222 202","2":"down 303"}})"),
            3);
  EXPECT_EQ(transports_.killed, (std::vector<std::string>{"localhost 101 /run",
                                                          "alice@node2:2222 202 /run",
                                                          "down 303 /run"}));
  EXPECT_NE(out_.str().find("rank 1 of the previous manager (pid 202 on alice@node2:2222) is gone"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("could not stop rank 2 (pid 303 on down)"), std::string::npos)
      << out_.str();
}

TEST_F(OrphansTest, ARunThatEndedLeftNothingToStop) {
  for (const char* state : {"done", "stopped", "failed"}) {
    EXPECT_EQ(Kill(std::string(R"({"state":")") + state + R"(","workers":{"0":"localhost 101"}})"),
              0);
  }
  EXPECT_TRUE(transports_.killed.empty());
}

TEST_F(OrphansTest, AnUnreadableOrMalformedStateStopsNothing) {
  EXPECT_EQ(KillOrphans(fs_, RunDir("/run"), transports_, out_), 0);  // no state.json
  EXPECT_EQ(Kill("{not json"), 0);
  EXPECT_EQ(Kill(R"({"state":"running","workers":{"0":"no;such host 5","1":"localhost x"}})"), 0);
  EXPECT_TRUE(transports_.killed.empty());
}

}  // namespace
}  // namespace mitra::run
