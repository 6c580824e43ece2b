// A job that admits only its own (docs/security.md): the attacks of the review, made on a real
// `mitra run` of the GPT example from another address of this machine (127.0.0.2, loopback
// like the job's 127.0.0.1 but not the address it was given), while it trains. Each is refused,
// the job trains every step exactly as the uninterrupted one, without a relaunch, rank 0's log
// names the refused connections, and nothing of the job listens on every interface.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/job_token.h"
#include "rendezvous/store_client.h"
#include "tests/common/run_helpers.h"
#include "tests/rendezvous/raw_socket.h"
#include "tests/worker/elastic_job.h"

namespace mitra {
namespace {

constexpr char kOutside[] = "127.0.0.2";

// A TCP connection from kOutside to the job's 127.0.0.1:`port`; -1 when refused.
int ConnectFromOutside(int port) { return testing::RawConnect(port, kOutside); }

void SendAll(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// The local addresses ("127.0.0.1:41234", "0.0.0.0:29500", "[::]:80") of the TCP sockets
// `pid` listens on, read from /proc as `ss -ltnp` does.
std::vector<std::string> ListeningAddresses(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(fds, ec)) {
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> found;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, skip, inode;
      fields >> slot >> local >> remote >> state;
      for (int i = 0; i < 5; ++i) fields >> skip;  // tx:rx, tr:when, retrnsmt, uid, timeout
      fields >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      const std::string hex = local.substr(0, local.find(':'));
      const int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      std::string address;
      if (hex.size() == 8) {
        in_addr a{static_cast<in_addr_t>(std::stoul(hex, nullptr, 16))};
        address = ::inet_ntoa(a);
      } else {
        address = hex == std::string(32, '0') ? "[::]" : "[" + hex + "]";
      }
      found.push_back(address + ":" + std::to_string(port));
    }
  }
  return found;
}

// MITRA_JOB_TOKEN of process `pid`'s environment ("" when it has none).
std::string TokenOf(pid_t pid) {
  const std::string environ = testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/environ");
  const std::string name = std::string("MITRA_JOB_TOKEN") + "=";
  for (size_t at = 0; at < environ.size();) {
    const size_t end = std::min(environ.find('\0', at), environ.size());
    if (environ.compare(at, name.size(), name) == 0) {
      return environ.substr(at + name.size(), end - at - name.size());
    }
    at = end + 1;
  }
  return "";
}

// Every process's command line, one per line.
std::string AllCommandLines() {
  std::string all;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    all += testing::ReadFileOrEmpty(entry.path().string() + "/cmdline") + "\n";
  }
  return all;
}

const testing::ElasticJob kJob{16, 120};

class Outsiders : public testing::ElasticRun {
 protected:
  void SetUp() override { ASSERT_FALSE(testing::Uninterrupted(kJob).losses.empty()); }
};

TEST_F(Outsiders, AreRefusedAndTheJobTrainsEveryStepAsTheUninterruptedOne) {
  auto mitra = StartJob(kJob, "localhost slots=4\n", 2, {"--checkpoint-every", "10"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<JsonObject> launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 1u);
  const std::string rendezvous = launches[0].GetString("rdzv").value_or("");
  ASSERT_EQ(rendezvous.rfind("127.0.0.1:", 0), 0u) << rendezvous;
  const int port = std::stoi(rendezvous.substr(rendezvous.find(':') + 1));

  // The job's token, as rank 0 holds it: on no process's command line.
  const std::vector<pid_t> pids = testing::LaunchPids(launches[0]);
  ASSERT_EQ(pids.size(), 4u);
  const std::string token = TokenOf(pids[0]);
  ASSERT_EQ(token.size(), 64u);
  EXPECT_TRUE(rendezvous::JobToken::Parse(token).ok());
  EXPECT_EQ(AllCommandLines().find(token), std::string::npos);
  // Every worker listens on the job's address only: the store on rank 0 (among others).
  const std::vector<std::string> rank0 = ListeningAddresses(pids[0]);
  EXPECT_NE(std::find(rank0.begin(), rank0.end(), rendezvous), rank0.end())
      << "rank 0 does not listen on " << rendezvous;
  for (pid_t pid : pids) {
    for (const std::string& address : ListeningAddresses(pid)) {
      EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << "pid " << pid << " listens on " << address;
    }
  }
  // Another job's token.
  auto theirs = rendezvous::StoreClient::Connect(rendezvous::JobToken::Generate(), "127.0.0.1",
                                                 port, 5);
  ASSERT_FALSE(theirs.ok());
  EXPECT_NE(theirs.status().message().find("refused this process's job token"), std::string::npos)
      << theirs.status().message();
  // A request in c10d TCPStore's form (a query type, a key, a number) naming a checkpoint's
  // `failed` key: an ADD of it made rank 0 drop that step's checkpoint when the store was c10d's.
  const int add = ConnectFromOutside(port);
  ASSERT_GE(add, 0);
  SendAll(add, std::string("\x02\x25\0\0\0\0\0\0\0", 9) + "gen-0/checkpoint/checkpoint/10/failed" +
                   std::string("\x01\0\0\0\0\0\0\0", 8));
  EXPECT_TRUE(testing::ClosedWithin(add, 1));
  // A header claiming a key of 2 GB.
  const int huge = ConnectFromOutside(port);
  ASSERT_GE(huge, 0);
  SendAll(huge, std::string("\x7f\xff\xff\xff", 4) + std::string(100, 'k'));
  EXPECT_TRUE(testing::ClosedWithin(huge, 1));
  // A client that stalls halfway through its proof, and 50 that send nothing: they stay
  // connected while the job trains on.
  const int stalled = ConnectFromOutside(port);
  ASSERT_GE(stalled, 0);
  SendAll(stalled, "mitra");
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(ConnectFromOutside(port));

  const testing::MitraResult r = mitra->Wait(180);
  for (int fd : idle) ::close(fd);
  for (int fd : {add, huge, stalled}) ::close(fd);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(testing::EventsNamed(run_dir_, "launch").size(), 1u) << "the job was relaunched";
  // Every checkpoint the job was asked for was written.
  std::set<double> checkpoints;
  for (const JsonObject& c : testing::EventsNamed(run_dir_, "checkpoint")) {
    checkpoints.insert(c.GetNumber("step").value_or(0));
  }
  for (double step = 10; step <= 120; step += 10) EXPECT_TRUE(checkpoints.count(step)) << step;
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/true);
  // Rank 0 told its log and the manager: the terminal and events.jsonl name the outsider.
  const std::string refused = "the rendezvous store closed a connection from 127.0.0.2";
  const std::string log = testing::ReadFileOrEmpty(run_dir_ + "/logs/gen-0/rank-0.log");
  EXPECT_NE(log.find(refused), std::string::npos) << log;
  EXPECT_NE(r.err.find("mitra: warning: rank 0: " + refused), std::string::npos) << r.err;
  bool recorded = false;
  for (const JsonObject& w : testing::EventsNamed(run_dir_, "worker_warning")) {
    recorded |= w.GetString("message").value_or("").find(refused) != std::string::npos;
  }
  EXPECT_TRUE(recorded) << "no worker_warning event names the refused connection";
  // The token is in no file of the run directory: no record or log holds it.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(run_dir_)) {
    if (!entry.is_regular_file()) continue;
    EXPECT_EQ(testing::ReadFileOrEmpty(entry.path()).find(token), std::string::npos)
        << entry.path();
  }
  testing::ExpectNoProcessLeft(run_dir_);
}

}  // namespace
}  // namespace mitra
