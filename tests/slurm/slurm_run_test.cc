// `mitra run --machines slurm --launcher srun` in a real Slurm: munged, slurmctld and slurmd
// started for the test on this machine (slurm_cluster.sh), a real allocation (salloc), the real
// mitra and the real GPT example, each worker a job step. The job must train exactly as the
// same job trained once without interruption (elastic_job.h), a killed worker must be recovered,
// and nothing may be left running. Needs root and Debian's slurm-wlm and munge.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/strings.h"
#include "tests/common/run_helpers.h"
#include "tests/prerequisite.h"
#include "tests/worker/elastic_job.h"
#ifdef MITRA_PYTHON_GPT_TRAIN
#include "tests/python/python_job.h"
#endif
#include "tests/worker/gpt_helpers.h"

namespace mitra {
namespace {

using testing::ExpectNoProcessLeft;
using testing::TempDir;

const testing::ElasticJob kJob{16, 40};

// The path of `tool` on PATH (or /usr/sbin), "" when it is not installed.
std::string Which(const std::string& tool) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string candidate = path.substr(begin, end - begin) + "/" + tool;
    if (end > begin && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

// What this machine lacks to run a Slurm cluster; "" when nothing.
std::string MissingPrerequisite() {
  for (const char* tool : {"munged", "slurmctld", "slurmd", "salloc", "srun", "scontrol"}) {
    if (Which(tool).empty()) {
      return std::string(tool) + " is not installed: apt-get install slurm-wlm munge";
    }
  }
  if (::geteuid() != 0) return "the Slurm tests start slurmd, which must run as root";
  return "";
}

class SlurmRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    missing_ = MissingPrerequisite();
    if (!missing_.empty()) return;
    dir_ = testing::MakeTempDir("mitra-slurm");
    const testing::MitraResult r =
        testing::RunProgram(SLURM_CLUSTER_SCRIPT, {"start", dir_}, dir_, 60);
    const size_t at = r.out.find("SLURM_CONF=");
    if (r.exit_code != 0 || at == std::string::npos) {
      cluster_error_ = "slurm_cluster.sh start failed:\n" + r.output();
      return;
    }
    slurm_conf_ = std::string(Trim(r.out.substr(at + 11)));
  }

  static void TearDownTestSuite() {
    if (dir_.empty()) return;
    const testing::MitraResult r =
        testing::RunProgram(SLURM_CLUSTER_SCRIPT, {"stop", dir_}, dir_, 60);
    EXPECT_EQ(r.exit_code, 0) << r.output();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }

  void SetUp() override {
    MITRA_SKIP_WITHOUT(missing_);
    ASSERT_TRUE(cluster_error_.empty()) << cluster_error_;
    ASSERT_FALSE(testing::Uninterrupted(kJob).losses.empty());
  }

  // salloc for one node and two tasks, running `mitra run --machines slurm --launcher srun`
  // with `flags` inside it.
  std::unique_ptr<testing::MitraProcess> StartInAllocation(const std::vector<std::string>& flags,
                                                          const testing::ElasticJob& job = kJob) {
    std::vector<std::string> args{"--nodes=1", "--ntasks=2", MITRA_BINARY};
    std::vector<std::string> run =
        testing::RunArgs(job, "slurm", run_dir_, 2, {"--launcher", "srun"});
    run.insert(run.begin() + 1, flags.begin(), flags.end());  // after "run"
    args.insert(args.end(), run.begin(), run.end());
    return testing::MitraProcess::Start(
        Which("salloc"), args, tmp_.path(),
        {{"SLURM_CONF", slurm_conf_}, {"MITRA_TRACE_SAMPLES", trace_}});
  }

  // Slurm's own view: no job of the test left in the queue.
  void ExpectNoJobLeft() {
    const testing::MitraResult q = testing::RunProgram(
        Which("squeue"), {"-h", "-o", "%i %T"}, tmp_.path(), 30, {{"SLURM_CONF", slurm_conf_}});
    ASSERT_EQ(q.exit_code, 0) << q.output();
    EXPECT_TRUE(Trim(q.out).empty()) << "jobs left: " << q.out;
  }

  static std::string missing_;
  static std::string cluster_error_;
  static std::string dir_;
  static std::string slurm_conf_;
  TempDir tmp_;
  const std::string run_dir_ = tmp_.Path("run");
  const std::string trace_ = tmp_.Path("trace");
};

std::string SlurmRun::missing_;
std::string SlurmRun::cluster_error_;
std::string SlurmRun::dir_;
std::string SlurmRun::slurm_conf_;

TEST_F(SlurmRun, TrainsToTheEndWithEachWorkerAJobStepOfTheAllocation) {
  auto mitra = StartInAllocation({});
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = mitra->Wait(240);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string node = std::string(host).substr(0, std::string(host).find('.'));
  EXPECT_NE(r.out.find("mitra: machines: " + node + " (2 slots)"), std::string::npos) << r.out;
  const std::vector<JsonObject> launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].GetNumber("world_size"), 2);
  // Each rank ran as a step of the allocation: its task reported the step before the program.
  for (const char* rank : {"rank-0.log", "rank-1.log"}) {
    const std::string log = testing::ReadFileOrEmpty(run_dir_ + "/logs/gen-0/" + rank);
    EXPECT_EQ(log.rfind("@mitra {\"event\":\"srun_task\",\"step\":\"", 0), 0u) << log;
  }
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
  ExpectNoJobLeft();
}

TEST_F(SlurmRun, AKilledWorkerIsRecoveredFromTheNewestCheckpoint) {
  auto mitra = StartInAllocation({"--checkpoint-every", "1"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  // The pids recorded are the workers' own on the node (this machine), not srun's.
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  testing::ExpectRecoveredFromAKilledWorker(kJob, mitra->Wait(240), run_dir_, trace_);
  ExpectNoJobLeft();
}

#ifdef MITRA_PYTHON_GPT_TRAIN
// A Python program's workers are job steps like any other's (srun passes the environment on,
// PYTHONPATH included).
TEST_F(SlurmRun, APythonProgramTrainsToTheEndAndRecoversAKilledWorker) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 40);
  ASSERT_FALSE(testing::Uninterrupted(job).losses.empty());
  auto mitra = StartInAllocation({"--checkpoint-every", "1"}, job);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  testing::ExpectRecoveredFromAKilledWorker(job, mitra->Wait(240), run_dir_, trace_);
  ExpectNoJobLeft();
}
#endif

TEST_F(SlurmRun, OutsideAnAllocationNothingStarts) {
  const testing::MitraResult r = testing::RunProgram(
      MITRA_BINARY, testing::RunArgs(kJob, "slurm", run_dir_, 2, {"--launcher", "srun"}),
      tmp_.path(), 60,
      {{"SLURM_CONF", slurm_conf_}, {"SLURM_JOB_NODELIST", ""}, {"SLURM_JOB_ID", ""}});
  EXPECT_EQ(r.exit_code, 2) << r.output();
  EXPECT_NE(r.err.find("SLURM_JOB_NODELIST is not set"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run_dir_));
}

}  // namespace
}  // namespace mitra
