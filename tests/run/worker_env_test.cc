#include "run/worker_env.h"

#include <gtest/gtest.h>

namespace mitra::run {
namespace {

using planner::GridRequest;
using planner::PlanGrid;

TEST(WorkerEnv, GivesEachRankItsPlaceAndDropsStaleVariables) {
  Result<GridPlan> plan = PlanGrid(GridRequest{{5}, 2, 8, 7, 0, 0, false});
  ASSERT_TRUE(plan.ok());
  LaunchSettings settings;
  settings.placement.rdzv_port = 29500;
  settings.placement.max_steps = 10;
  settings.placement.threads = 2;
  settings.placement.timeout_s = 0.5;
  settings.placement.run_dir = "/runs/a";
  const Environment base = {
      {"PATH", "/bin"},         {"MITRA_RANK", "7"},         {"MITRA_DESCRIBE", "1"},
      {"MITRA_HEARTBEAT_S", "0"}, {"MITRA_PARTITION", "9,9"}, {"MITRA_OTHER", "kept"}};
  const Environment env = WorkerEnvironment(base, *plan, plan->ranks[3], "127.0.0.1", settings);
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.at("MITRA_OTHER"), "kept");
  EXPECT_EQ(env.count("MITRA_DESCRIBE"), 0u);
  EXPECT_EQ(env.at("MITRA_RANK"), "3");
  EXPECT_EQ(env.at("MITRA_LOCAL_RANK"), "3");
  EXPECT_EQ(env.at("MITRA_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("MITRA_STAGE_TO_RANK_MAP"), "0,2;1,3;");
  EXPECT_EQ(env.at("MITRA_GLOBAL_BATCH"), "7");
  EXPECT_EQ(env.at("MITRA_CHUNK_SIZE"), "1");
  EXPECT_EQ(env.at("MITRA_MAX_STEPS"), "10");
  EXPECT_EQ(env.at("MITRA_RESUME_STEP"), "0");
  EXPECT_EQ(env.at("MITRA_RDZV_HOST"), "127.0.0.1");
  EXPECT_EQ(env.at("MITRA_RDZV_PORT"), "29500");
  EXPECT_EQ(env.at("MITRA_GENERATION"), "0");
  EXPECT_EQ(env.at("MITRA_HOST"), "127.0.0.1");
  EXPECT_EQ(env.at("MITRA_THREADS"), "2");
  EXPECT_EQ(env.at("MITRA_TIMEOUT_S"), "0.5");
  EXPECT_EQ(env.at("MITRA_RUN_DIR"), "/runs/a");
  EXPECT_EQ(env.at("MITRA_HEARTBEAT_S"), "1");  // the manager's, not a stale one
  // The job's token: the same for every rank of a job, another job's another.
  EXPECT_EQ(env.at("MITRA_JOB_TOKEN").size(), 64u);
  EXPECT_EQ(env.at("MITRA_JOB_TOKEN"), settings.placement.job_token);
  EXPECT_EQ(WorkerEnvironment(base, *plan, plan->ranks[0], "127.0.0.1", settings)
                .at("MITRA_JOB_TOKEN"),
            env.at("MITRA_JOB_TOKEN"));
  EXPECT_NE(LaunchSettings().placement.job_token, settings.placement.job_token);
  EXPECT_EQ(SecretVariables(), std::vector<std::string>{"MITRA_JOB_TOKEN"});
  EXPECT_EQ(env.count("MITRA_PARTITION"), 0u);  // a plan without one leaves the program's own
  EXPECT_EQ(env.count("MITRA_SCHEDULE"), 0u);
  EXPECT_EQ(env.count("MITRA_STEP_TRACE"), 0u);

  const Environment describe = DescribeEnvironment(base);
  EXPECT_EQ(describe.at("MITRA_DESCRIBE"), "1");
  EXPECT_EQ(describe.count("MITRA_RANK"), 0u);
}

TEST(WorkerEnv, APlannedShapeCarriesTheSchedulePartitionAndTrace) {
  Result<GridPlan> plan = PlanGrid(GridRequest{{2}, 2, 8, 8, 0, 0, false});
  ASSERT_TRUE(plan.ok());
  plan->schedule = planner::ScheduleKind::k1F1B;
  plan->recompute = true;
  plan->partition = "3,5";
  LaunchSettings settings;
  settings.trace_dir = "/runs/a/traces";
  const Environment env = WorkerEnvironment({}, *plan, plan->ranks[1], "127.0.0.1", settings);
  EXPECT_EQ(env.at("MITRA_SCHEDULE"), "1f1b");
  EXPECT_EQ(env.at("MITRA_RECOMPUTE"), "1");
  EXPECT_EQ(env.at("MITRA_PARTITION"), "3,5");
  EXPECT_EQ(env.count("MITRA_SHARES"), 0u);  // even shares: nothing to say
  EXPECT_EQ(env.at("MITRA_STEP_TRACE"), "/runs/a/traces/rank-1.trace.json");
  plan->shares = {5, 3};
  EXPECT_EQ(WorkerEnvironment({}, *plan, plan->ranks[1], "127.0.0.1", settings).at("MITRA_SHARES"),
            "5,3");
  EXPECT_EQ(env.count("MITRA_PRECISION"), 0u);  // the program's own unless --precision
  settings.placement.precision = "bf16";
  EXPECT_EQ(WorkerEnvironment({}, *plan, plan->ranks[1], "127.0.0.1", settings).at("MITRA_PRECISION"),
            "bf16");
}

TEST(WorkerEnv, RemoteWorkersGetThePortableVariablesAndTheCodeDirectory) {
  const Environment manager = {{"PATH", "/bin"}, {"HOME", "/root"}, {"OMP_NUM_THREADS", "1"},
                               {"SSH_AUTH_SOCK", "/tmp/a"}, {"KEEP", "manager's"}};
  const WorkerProgram w = WorkerProgram::Make("/opt/train", {"--lr", "1"}, manager,
                                              {{"KEEP", "--env's"}, {"EXTRA", "x"}}, "/here",
                                              "/code");
  EXPECT_EQ(w.EnvironmentFor(true).at("HOME"), "/root");
  EXPECT_EQ(w.EnvironmentFor(true).at("KEEP"), "--env's");
  const Environment& remote = w.EnvironmentFor(false);
  EXPECT_EQ(remote.at("PATH"), "/bin");
  EXPECT_EQ(remote.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(remote.count("HOME"), 0u);
  EXPECT_EQ(remote.count("SSH_AUTH_SOCK"), 0u);
  EXPECT_EQ(remote.at("KEEP"), "--env's");
  EXPECT_EQ(remote.at("EXTRA"), "x");
  EXPECT_EQ(w.DirectoryFor(true), "/here");
  EXPECT_EQ(w.DirectoryFor(false), "/code");
  const WorkerProgram no_code_dir = WorkerProgram::Make("/opt/train", {}, manager, {}, "/here", "");
  EXPECT_EQ(no_code_dir.DirectoryFor(false), "/here");
}

TEST(WorkerEnv, WorkersAskForAHeapOnHugePagesUnlessTheUserSaysOtherwise) {
  const auto local = [](const Environment& manager,
                        std::vector<std::pair<std::string, std::string>> overrides = {}) {
    const WorkerProgram w = WorkerProgram::Make("/opt/train", {}, manager, overrides, "/here", "");
    EXPECT_EQ(w.EnvironmentFor(true).count("GLIBC_TUNABLES"),
              w.EnvironmentFor(false).count("GLIBC_TUNABLES"));
    if (w.EnvironmentFor(true).count("GLIBC_TUNABLES")) {
      EXPECT_EQ(w.EnvironmentFor(true).at("GLIBC_TUNABLES"),
                w.EnvironmentFor(false).at("GLIBC_TUNABLES"));
    }
    const auto it = w.EnvironmentFor(true).find("GLIBC_TUNABLES");
    return it == w.EnvironmentFor(true).end() ? std::string("(unset)") : it->second;
  };
  EXPECT_EQ(local({}), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(local({{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"}}),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(local({{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=0"}}), "glibc.malloc.hugetlb=0");
  EXPECT_EQ(local({}, {{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=2"}}), "glibc.malloc.hugetlb=2");
  EXPECT_EQ(local({{"MITRA_MALLOC_TUNING", "0"}}), "(unset)");
  EXPECT_EQ(local({}, {{"MITRA_MALLOC_TUNING", "0"}}), "(unset)");
  EXPECT_EQ(local({{"MITRA_MALLOC_TUNING", "1"}}), "glibc.malloc.hugetlb=1");
}

}  // namespace
}  // namespace mitra::run
