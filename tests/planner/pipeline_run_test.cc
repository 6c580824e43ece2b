// The simulator's event loop on its own: messages and shared cores.
#include "planner/pipeline_run.h"

#include <gtest/gtest.h>

#include "tests/planner/uniform_profile.h"

namespace mitra::planner::detail {
namespace {

SimulationInput Shape(const Profile& p, int stages, int replicas, int64_t batch,
                      std::vector<std::string> machines) {
  SimulationInput in;
  in.profile = &p;
  in.global_batch = batch;
  in.candidate.stages = stages;
  in.candidate.replicas = replicas;
  in.candidate.chunk_size = 1;
  in.candidate.partition.assign(stages, p.num_segments() / stages);
  in.rank_machines = std::move(machines);
  return in;
}

TEST(RunPipelines, AReceiveWaitsForTheSendThenTheBusyLinksTransfer) {
  const double f = 0.01, b = 0.02;
  Profile p = Uniform(2, f, b);
  p.links[0].latency_s = 0.5;  // m0 - m1, idle: not what a pipeline sees
  p.links[0].busy_latency_s = 0.003;
  p.links[0].bytes_per_s = 64 / 0.001;  // the 64 bytes of a message take 1 ms
  const double transfer = 0.003 + 0.001;
  const RankSet ranks = BuildRanks(Shape(p, 2, 1, 1, {"m0", "m1"}), {0});
  const StageCosts costs(p);
  const std::vector<Timeline> t = RunPipelines(ranks, {0, 1}, nullptr, costs, p, /*trace=*/true);
  ASSERT_EQ(t.size(), 2u);
  // Stage 1 waits for the activations from f, computes f + b, sends the gradients back.
  EXPECT_DOUBLE_EQ(t[1].done, f + transfer + f + b);
  EXPECT_DOUBLE_EQ(t[0].done, f + transfer + f + b + transfer + b);
  EXPECT_DOUBLE_EQ(t[0].final_backward_start, f + transfer + f + b + transfer);
  EXPECT_DOUBLE_EQ(t[0].busy, f + b);
  ASSERT_FALSE(t[1].events.empty());
  EXPECT_EQ(t[1].events[0].name, "Ra0");  // waited from the start
  EXPECT_DOUBLE_EQ(t[1].events[0].start, 0);
  EXPECT_DOUBLE_EQ(t[1].events[0].end, f + transfer);
}

// A send the profile measured to take its caller s delays the sender's next instruction by s,
// the message leaving at its start; it is not the model's computation (busy).
TEST(RunPipelines, ASendTakesItsCallerWhatTheProfileMeasured) {
  const double f = 0.01, b = 0.02, s = 0.004;
  Profile p = Uniform(2, f, b);
  p.links[0].busy_latency_s = 0.003;
  p.links[0].bytes_per_s = 64 / 0.001;
  p.links[0].send_latency_s = s - 0.0005;
  p.links[0].send_bytes_per_s = 64 / 0.0005;  // 64 bytes: s in all
  EXPECT_DOUBLE_EQ(p.SendSeconds("m0", "m1", 64), s);
  const double transfer = 0.003 + 0.001;
  const RankSet ranks = BuildRanks(Shape(p, 2, 1, 1, {"m0", "m1"}), {0});
  const StageCosts costs(p);
  const std::vector<Timeline> t = RunPipelines(ranks, {0, 1}, nullptr, costs, p, /*trace=*/true);
  ASSERT_EQ(t.size(), 2u);
  // Stage 1 waits for the activations sent at f, computes f + b, spends s sending the gradients;
  // stage 0, after its own send of s, waits for them and runs its b.
  EXPECT_DOUBLE_EQ(t[1].done, f + transfer + f + b + s);
  EXPECT_DOUBLE_EQ(t[0].done, f + transfer + f + b + transfer + b);
  EXPECT_DOUBLE_EQ(t[0].busy, f + b);
  EXPECT_DOUBLE_EQ(t[1].busy, f + b);
  ASSERT_GE(t[0].events.size(), 2u);
  EXPECT_EQ(t[0].events[1].name, "Sa0");
  EXPECT_DOUBLE_EQ(t[0].events[1].start, f);
  EXPECT_DOUBLE_EQ(t[0].events[1].end, f + s);
}

TEST(RunPipelines, RanksOnOneMachineShareItsSpeedUnlessItsLoadIsFixed) {
  const double f = 0.01, b = 0.02;
  const Profile p = Uniform(1, f, b, 1000, {1.0, 0.5});
  const RankSet ranks = BuildRanks(Shape(p, 1, 2, 2, {"m0", "m0"}), {0, 1});
  const StageCosts costs(p);
  const std::vector<int> alone = {1}, full = {2};
  EXPECT_DOUBLE_EQ(RunPipelines(ranks, {0, 1}, nullptr, costs, p, false)[0].done, 2 * (f + b));
  EXPECT_DOUBLE_EQ(RunPipelines(ranks, {0}, nullptr, costs, p, false)[0].done, f + b);
  EXPECT_DOUBLE_EQ(RunPipelines(ranks, {0}, &full, costs, p, false)[0].done, 2 * (f + b));
  EXPECT_DOUBLE_EQ(RunPipelines(ranks, {0, 1}, &alone, costs, p, false)[1].done, f + b);
}

}  // namespace
}  // namespace mitra::planner::detail
