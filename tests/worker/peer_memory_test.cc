// Copying from a peer process's memory (peer_memory.h): who may, and what a failed copy says.
// Between real processes the exchange's end-to-end tests use it (elastic_run_test.cc).
#include "worker/state/peer_memory.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/comm/comm.h"

namespace mitra::worker {
namespace {

TEST(PeerMemory, AProcessOfTheSameMachineIsReadOnlyWhenItsCanaryReadsBack) {
  const ProcessAddress me = ThisProcess();
  EXPECT_NE(me.host_key, 0);
  EXPECT_TRUE(CanRead(me));
  ProcessAddress wrong_value = me;
  wrong_value.canary_value ^= 1;  // another process at the same address holds another value
  EXPECT_FALSE(CanRead(wrong_value));
  ProcessAddress elsewhere = me;
  elsewhere.host_key ^= 1;  // another machine, or another pid namespace
  EXPECT_FALSE(SameHost(me, elsewhere));
  EXPECT_FALSE(CanRead(elsewhere));
  ::setenv("MITRA_SAME_MACHINE_COPY", "0", 1);
  EXPECT_FALSE(CanRead(me));
  ::unsetenv("MITRA_SAME_MACHINE_COPY");
}

TEST(PeerMemory, CopiesAChildsMemoryAndAGoneProcessIsAPeerError) {
  std::vector<int64_t> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * 7);
  const int64_t address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(values.data()));
  const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(int64_t));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a copy of this process: `values` at the same address
    ::pause();
    ::_exit(0);
  }
  std::vector<int64_t> got(values.size(), -1);
  ReadPeerMemory(child, address, got.data(), bytes, "the test's values");
  EXPECT_EQ(got, values);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  try {
    ReadPeerMemory(child, address, got.data(), bytes, "the test's values");
    ADD_FAILURE() << "a copy from a process that is gone succeeded";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("the test's values: copying from process " +
                                         std::to_string(child) + " failed"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mitra::worker
