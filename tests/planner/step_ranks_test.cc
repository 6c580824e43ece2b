// The simulator's ranks on their own: what each does, what it costs and holds.
#include "planner/step_ranks.h"

#include <gtest/gtest.h>

#include "tests/planner/uniform_profile.h"

namespace mitra::planner::detail {
namespace {

SimulationInput TwoByTwo(const Profile& p, int64_t batch, int64_t chunk,
                         std::vector<std::string> machines,
                         ScheduleKind schedule = ScheduleKind::k1F1B) {
  SimulationInput in;
  in.profile = &p;
  in.global_batch = batch;
  in.candidate.stages = 2;
  in.candidate.replicas = 2;
  in.candidate.chunk_size = chunk;
  in.candidate.schedule = schedule;
  in.candidate.partition = {1, 3};
  in.rank_machines = std::move(machines);
  return in;
}

TEST(BuildRanks, EachRankRunsItsStagesListOnItsShareOfTheBatch) {
  const Profile p = Uniform(4, 0.01, 0.02);
  // 10 samples in micro-batches of 3: 3, 3 for replica 0; 3, 1 for replica 1.
  const RankSet ranks = BuildRanks(TwoByTwo(p, 10, 3, {"m0", "m0", "m1", "m2"}), {0, 1});
  ASSERT_EQ(ranks.specs.size(), 4u);
  EXPECT_EQ(ranks.index, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ranks.addresses, (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_EQ(ranks.machine_load, (std::vector<int>{2, 1, 1}));
  const RankSpec& last = ranks.specs[3];
  EXPECT_EQ(last.rank, 3);
  EXPECT_EQ(last.stage, 1);
  EXPECT_EQ(last.replica, 1);
  EXPECT_EQ(last.machine, 2);
  EXPECT_EQ(last.sizes, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(ranks.specs[0].sizes, (std::vector<int64_t>{3, 3}));
  ASSERT_EQ(last.chunks.size(), 1u);
  EXPECT_EQ(last.chunks[0].first_segment, 1);
  EXPECT_EQ(last.chunks[0].end_segment, 4);
  EXPECT_EQ(last.segments, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(last.chunks[0].last);
  EXPECT_FALSE(last.chunks[0].first);
  EXPECT_EQ(last.chunks[0].prev_rank, 2);
  EXPECT_EQ(last.chunks[0].next_rank, -1);
  EXPECT_EQ(last.list, BuildSchedule(ScheduleKind::k1F1B, 2, 1, 2, false));
  EXPECT_EQ(last.list[last.final_backward], (Instruction{Op::kBackward, 1}));
}

TEST(BuildRanks, OnlyTheGivenReplicasAreBuilt) {
  const Profile p = Uniform(4, 0.01, 0.02);
  const RankSet ranks =
      BuildRanks(TwoByTwo(p, 10, 3, {"m0", "m0", "m1", "m1"}, ScheduleKind::kGPipe), {1});
  ASSERT_EQ(ranks.specs.size(), 2u);
  EXPECT_EQ(ranks.index, (std::vector<int>{-1, -1, 0, 1}));
  EXPECT_EQ(ranks.addresses, (std::vector<std::string>{"m1"}));
  EXPECT_EQ(ranks.machine_load, (std::vector<int>{2}));
}

TEST(BuildRanks, AStepStartsWhereTheRanksUpdateOnABusierMachineEnded) {
  Profile p = Uniform(4, 0.01, 0.02, 1000, {1.0, 0.5});
  for (SegmentProfile& s : p.machines[0].segments) s.update_s = 0.001;
  // Ranks 0 and 1 share m0 (each updates at half speed); ranks 2 and 3 have a machine each.
  const RankSet ranks = BuildRanks(TwoByTwo(p, 8, 2, {"m0", "m0", "m1", "m2"}), {0, 1});
  EXPECT_DOUBLE_EQ(ranks.specs[0].update_s, 0.002);  // 1 segment at speed 0.5
  EXPECT_DOUBLE_EQ(ranks.specs[1].update_s, 0.006);  // 3 segments at speed 0.5
  EXPECT_DOUBLE_EQ(ranks.specs[2].update_s, 0.001);
  EXPECT_DOUBLE_EQ(ranks.specs[3].update_s, 0.003);
  EXPECT_DOUBLE_EQ(ranks.specs[0].start, 0.001);
  EXPECT_DOUBLE_EQ(ranks.specs[1].start, 0.005);
  EXPECT_DOUBLE_EQ(ranks.specs[2].start, 0.0);
  EXPECT_DOUBLE_EQ(ranks.specs[3].start, 0.002);
}

TEST(StageCosts, FirstAndLastStagesLoadSamplesButNotToRecompute) {
  Profile p = Uniform(4, 0.01, 0.02);
  p.machines[0].sample_s = 0.001;
  const RankSet ranks = BuildRanks(TwoByTwo(p, 8, 2, {"m0", "m0", "m0", "m0"}), {0});
  const StageCosts costs(p);
  const RankSpec& first = ranks.specs[0];  // 1 segment
  const RankSpec& last = ranks.specs[1];   // 3 segments
  EXPECT_DOUBLE_EQ(costs.Work(first, {Op::kForward, 0}, 2), 0.01 + 2 * 0.001);
  EXPECT_DOUBLE_EQ(costs.Work(first, {Op::kForwardDiscard, 0}, 2), 0.01 + 2 * 0.001);
  EXPECT_DOUBLE_EQ(costs.Work(first, {Op::kRecompute, 0}, 2), 0.01);
  EXPECT_DOUBLE_EQ(costs.Work(last, {Op::kBackward, 0}, 2), 3 * 0.02);
  EXPECT_EQ(costs.Work(last, {Op::kSendGradients, 0}, 2), 0);
  EXPECT_EQ(costs.InputBytes(first, 0, 2), 0);
  EXPECT_EQ(costs.InputBytes(last, 0, 2), 64);  // what segment 0 hands on
  EXPECT_EQ(costs.GraphBytes(last, 0, 2), 3 * 1000);
}

// Two chunks per rank: under zb-v rank 0 holds the first and the last range, each costed on its
// own, the first loading the samples for its forward and the last for its loss; rank 1 holds
// the middle two, and its turn of the V sends to itself.
TEST(StageCosts, EachChunkCostsItsOwnSegments) {
  Profile p = Uniform(4, 0.01, 0.02);
  p.machines[0].sample_s = 0.001;
  SimulationInput in = TwoByTwo(p, 8, 2, {"m0", "m0", "m0", "m0"}, ScheduleKind::kZbV);
  in.candidate.partition = {1, 1, 1, 1};
  const RankSet ranks = BuildRanks(in, {0});
  const StageCosts costs(p);
  const RankSpec& zero = ranks.specs[0];
  const RankSpec& one = ranks.specs[1];
  EXPECT_EQ(zero.segments, (std::vector<int>{0, 3}));
  EXPECT_EQ(one.segments, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(costs.Work(zero, {Op::kForward, 0, 0}, 2), 0.01 + 2 * 0.001);
  EXPECT_DOUBLE_EQ(costs.Work(zero, {Op::kForward, 0, 1}, 2), 0.01 + 2 * 0.001);
  EXPECT_DOUBLE_EQ(costs.Work(one, {Op::kForward, 0, 1}, 2), 0.01);
  EXPECT_EQ(costs.InputBytes(zero, 1, 2), 64);
  EXPECT_EQ(one.chunks[0].next_rank, 1);
  EXPECT_EQ(one.chunks[0].next_chunk, 1);
  EXPECT_EQ(one.chunks[1].prev_rank, 1);
  EXPECT_EQ(zero.chunks[1].prev_rank, 1);
  EXPECT_EQ(zero.chunks[1].next_rank, -1);
}

TEST(PeakActivationBytes, GPipeHoldsEveryGraphAndOneFOneBOnlyThoseInFlight) {
  const Profile p = Uniform(4, 0.01, 0.02);
  const StageCosts costs(p);
  // 8 micro-batches of 1 per replica; stage 1 receives 64 bytes with each, and stage 0 posts
  // the receive of their 64 bytes of gradients as it sends them (until its backward), stage 1
  // the next two activation messages (docs/runtime.md).
  auto peak = [&](ScheduleKind kind, bool recompute, int stage) {
    SimulationInput in = TwoByTwo(p, 16, 1, {"m0", "m0", "m0", "m0"}, kind);
    in.candidate.recompute = recompute;
    return PeakActivationBytes(BuildRanks(in, {0}).specs[stage], costs);
  };
  EXPECT_EQ(peak(ScheduleKind::kGPipe, false, 0), 8 * (1000 + 64));
  EXPECT_EQ(peak(ScheduleKind::kGPipe, false, 1), 8 * (3 * 1000 + 64));  // none left ahead
  EXPECT_EQ(peak(ScheduleKind::k1F1B, false, 0), 2 * (1000 + 64));
  EXPECT_EQ(peak(ScheduleKind::k1F1B, false, 1), 3 * 1000 + 64 + 2 * 64);
  EXPECT_EQ(peak(ScheduleKind::k1F1B, true, 0), 1000 + 2 * 64);  // one graph, recomputed
  EXPECT_EQ(peak(ScheduleKind::kVaruna, false, 0), 1000 + 2 * 64);
}

}  // namespace
}  // namespace mitra::planner::detail
