// `mitra run --metrics-port` end to end: the real binary training the real GPT example (tiny) on
// local processes, its /metrics scraped by curl while it trains and after the machine list grew
// (a morph); and a port that is taken, or an address that is none, refused before anything
// starts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "common/free_port.h"
#include "common/strings.h"
#include "tests/common/run_helpers.h"
#include "tests/prerequisite.h"

namespace mitra::testing {
namespace {

// The families docs/mitra-run.md promises, each with its HELP and TYPE.
const char* const kFamilies[] = {
    "mitra_step",
    "mitra_loss",
    "mitra_samples_per_second",
    "mitra_generation",
    "mitra_world_size",
    "mitra_failures_total",
    "mitra_morphs_total",
    "mitra_downtime_seconds_total",
    "mitra_stages",
    "mitra_replicas",
    "mitra_ready_workers",
    "mitra_checkpoints_total",
    "mitra_checkpoint_blocked_seconds_total",
    "mitra_restarts_total",
    "mitra_machines",
    "mitra_stragglers_total",
    "mitra_state",
};

// `name` found on PATH, or "".
std::string OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// One scrape of http://127.0.0.1:PORT/metrics: "name{labels}" -> value, and the families that
// have a HELP line.
struct Scrape {
  bool ok = false;
  std::string text;
  std::map<std::string, double> samples;
  std::map<std::string, std::string> help;

  double operator[](const std::string& sample) const {
    const auto it = samples.find(sample);
    return it == samples.end() ? std::nan("") : it->second;
  }
};

Scrape Get(const std::string& curl, int port, const std::string& dir) {
  Scrape scrape;
  const MitraResult r = RunProgram(curl,
                                   {"-sS", "--fail", "--max-time", "10",
                                    "http://127.0.0.1:" + std::to_string(port) + "/metrics"},
                                   dir, 20);
  scrape.text = r.output();
  scrape.ok = r.exit_code == 0;
  if (!scrape.ok) return scrape;
  for (const std::string_view view : SplitLines(r.out)) {
    const std::string line(view);
    if (StartsWith(line, "# HELP ")) {
      const size_t name_end = line.find(' ', 7);
      scrape.help[line.substr(7, name_end - 7)] = line.substr(name_end + 1);
    } else if (!line.empty() && line[0] != '#') {
      const size_t space = line.rfind(' ');
      scrape.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  return scrape;
}

class MetricsScrape : public ::testing::Test {
 protected:
  void SetUp() override {
    curl_ = OnPath("curl");
    MITRA_SKIP_WITHOUT(curl_.empty() ? "curl is not installed (scripts/setup installs it)" : "");
    Result<int> port = PickFreeTcpPort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    machines_ = tmp_.Write("machines.txt", "localhost slots=1\n");
  }

  std::vector<std::string> Args(const std::vector<std::string>& flags) const {
    std::vector<std::string> args = {"run",       "--machines", machines_,   "--batch-size", "16",
                                     "--nstages", "1",          "--run-dir", run_dir_};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", MITRA_GPT_TRAIN, "--model", "tiny"});
    return args;
  }

  // Scrapes until `done` holds (at most `timeout_s`); the last scrape.
  Scrape ScrapeUntil(const std::function<bool(const Scrape&)>& done, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    Scrape scrape;
    do {
      scrape = Get(curl_, port_, tmp_.path());
      if (scrape.ok && done(scrape)) return scrape;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } while (std::chrono::steady_clock::now() < deadline);
    return scrape;
  }

  TempDir tmp_;
  std::string curl_;
  int port_ = 0;
  std::string machines_;
  const std::string run_dir_ = tmp_.Path("run");
};

TEST_F(MetricsScrape, ServesTheRunWhileItTrainsAndAfterAMorph) {
  auto mitra = MitraProcess::Start(MITRA_BINARY,
                                   Args({"--max-steps", "100000", "--checkpoint-every", "5",
                                         "--metrics-port", std::to_string(port_)}),
                                   tmp_.path());
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();

  const Scrape first = ScrapeUntil([](const Scrape& s) { return s["mitra_step"] >= 2; }, 30);
  ASSERT_TRUE(first.ok) << first.text;
  for (const char* family : kFamilies) {
    EXPECT_EQ(first.help.count(family), 1u) << family << " missing in\n" << first.text;
  }
  EXPECT_GE(first["mitra_step"], 2) << first.text;
  EXPECT_GT(first["mitra_loss"], 0) << first.text;
  EXPECT_LT(first["mitra_loss"], 20) << first.text;  // a byte-level model starts near ln 256
  EXPECT_GT(first["mitra_samples_per_second"], 0) << first.text;
  EXPECT_EQ(first["mitra_world_size"], 1) << first.text;
  EXPECT_EQ(first["mitra_stages"], 1) << first.text;
  EXPECT_EQ(first["mitra_generation"], 0) << first.text;
  EXPECT_EQ(first["mitra_state{state=\"running\"}"], 1) << first.text;
  EXPECT_EQ(first["mitra_machines{state=\"in_use\"}"], 1) << first.text;
  EXPECT_EQ(first["mitra_failures_total"], 0) << first.text;
  EXPECT_EQ(first["mitra_morphs_total"], 0) << first.text;

  // Training goes on: a later scrape sees a later step, and checkpoints counted.
  const Scrape later = ScrapeUntil(
      [&first](const Scrape& s) {
        return s["mitra_step"] > first["mitra_step"] && s["mitra_checkpoints_total"] >= 1;
      },
      60);
  EXPECT_GT(later["mitra_step"], first["mitra_step"]) << later.text;
  EXPECT_GE(later["mitra_checkpoints_total"], 1) << later.text;
  EXPECT_GE(later["mitra_last_checkpoint_step"], 5) << later.text;

  // A second slot: the job grows into 1 x 2, and the scrape says what it cost.
  const std::string staged = tmp_.Write("machines.txt.new", "localhost slots=2\n");
  ASSERT_EQ(std::rename(staged.c_str(), machines_.c_str()), 0);
  ASSERT_TRUE(mitra->WaitForStdout("mitra: morph done", 120)) << mitra->Stdout() << mitra->Stderr();
  const Scrape grown = ScrapeUntil(
      [](const Scrape& s) { return s["mitra_world_size"] == 2 && s["mitra_step"] > 0; }, 30);
  EXPECT_EQ(grown["mitra_world_size"], 2) << grown.text;
  EXPECT_EQ(grown["mitra_replicas"], 2) << grown.text;
  EXPECT_EQ(grown["mitra_generation"], 1) << grown.text;
  EXPECT_EQ(grown["mitra_morphs_total"], 1) << grown.text;
  EXPECT_EQ(grown["mitra_restarts_total"], 0) << grown.text;
  EXPECT_GT(grown["mitra_downtime_seconds_total{kind=\"morph\"}"], 0) << grown.text;
  EXPECT_GE(grown["mitra_step"], later["mitra_step"]) << grown.text;
  // The downtime is the first_step record's, as events.jsonl has it.
  const std::vector<JsonObject> first_steps = EventsNamed(run_dir_, "first_step");
  ASSERT_EQ(first_steps.size(), 1u);
  EXPECT_DOUBLE_EQ(grown["mitra_downtime_seconds_total{kind=\"morph\"}"],
                   first_steps[0].GetNumber("downtime_s").value_or(-1));

  mitra->Signal(SIGINT);
  const MitraResult r = mitra->Wait(120);
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_FALSE(Get(curl_, port_, tmp_.path()).ok) << "still served after mitra run exited";
}

TEST_F(MetricsScrape, ATakenPortIsRefusedBeforeAnythingStarts) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);

  const MitraResult r =
      RunProgram(MITRA_BINARY, Args({"--max-steps", "5", "--metrics-port", std::to_string(port_)}),
                 tmp_.path(), 60);
  ::close(listener);
  EXPECT_EQ(r.exit_code, 2) << r.output();
  const std::string port = std::to_string(port_);
  EXPECT_NE(r.err.find("mitra run: --metrics-port " + port + ": 127.0.0.1:" + port +
                       " is taken by another program (`ss -ltnp` shows which): pick a free "
                       "port with --metrics-port"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(run_dir_)) << "the run directory was created";
  EXPECT_EQ(r.out.find("launched"), std::string::npos) << r.out;
}

TEST_F(MetricsScrape, AnAddressThatIsNoneIsRefused) {
  const MitraResult r = RunProgram(MITRA_BINARY,
                                   Args({"--max-steps", "5", "--metrics-port",
                                         std::to_string(port_), "--metrics-address", "nowhere"}),
                                   tmp_.path(), 60);
  EXPECT_EQ(r.exit_code, 2) << r.output();
  EXPECT_NE(r.err.find("mitra run: --metrics-address 'nowhere' is not an IPv4 address"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(run_dir_)) << "the run directory was created";
}

}  // namespace
}  // namespace mitra::testing
