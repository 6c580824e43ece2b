#include "manager/worker_env.h"

#include <gtest/gtest.h>

namespace mitra::manager {
namespace {

using planner::GridRequest;
using planner::PlanGrid;

TEST(WorkerEnv, GivesEachRankItsPlaceAndDropsStaleVariables) {
  Result<GridPlan> plan = PlanGrid(GridRequest{{5}, 2, 8, 7, 0, 0, false});
  ASSERT_TRUE(plan.ok());
  LaunchSettings settings;
  settings.rdzv_port = 29500;
  settings.max_steps = 10;
  settings.threads = 2;
  settings.timeout_s = 0.5;
  settings.run_dir = "/runs/a";
  const Environment base = {
      {"PATH", "/bin"}, {"MITRA_RANK", "7"}, {"MITRA_DESCRIBE", "1"}, {"MITRA_OTHER", "kept"}};
  const Environment env = WorkerEnvironment(base, *plan, plan->ranks[3], "127.0.0.1", settings);
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.at("MITRA_OTHER"), "kept");
  EXPECT_EQ(env.count("MITRA_DESCRIBE"), 0u);
  EXPECT_EQ(env.at("MITRA_RANK"), "3");
  EXPECT_EQ(env.at("MITRA_LOCAL_RANK"), "3");
  EXPECT_EQ(env.at("MITRA_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("MITRA_STAGE_TO_RANK_MAP"), "0,2;1,3;");
  EXPECT_EQ(env.at("MITRA_GLOBAL_BATCH"), "7");
  EXPECT_EQ(env.count("MITRA_REPLICA_BATCH"), 0u);
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

  const Environment describe = DescribeEnvironment(base);
  EXPECT_EQ(describe.at("MITRA_DESCRIBE"), "1");
  EXPECT_EQ(describe.count("MITRA_RANK"), 0u);
}

}  // namespace
}  // namespace mitra::manager
