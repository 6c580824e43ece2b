// The simulator against closed forms, and the planner's enumeration, on made-up profiles.
#include "planner/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "planner/planner.h"
#include "planner/profile.h"
#include "planner/shape_policy.h"
#include "tests/planner/uniform_profile.h"

namespace mitra::planner {
namespace {

SimulationInput Input(const Profile& p, int stages, int replicas, int64_t batch, int64_t chunk,
                      ScheduleKind schedule, std::vector<std::string> machines = {}) {
  SimulationInput in;
  in.profile = &p;
  in.global_batch = batch;
  in.candidate.stages = stages;
  in.candidate.replicas = replicas;
  in.candidate.chunk_size = chunk;
  in.candidate.schedule = schedule;
  const int ranges = LayoutOf(schedule, stages).num_virtual_stages();
  in.candidate.partition.assign(ranges, p.num_segments() / ranges);
  if (machines.empty()) {  // every rank on a machine of its own
    for (int r = 0; r < stages * replicas; ++r) machines.push_back("m" + std::to_string(r + 1));
  }
  in.rank_machines = machines;
  return in;
}

TEST(Simulator, PipelineBubbleMatchesTheClosedFormForGPipeAndOneFOneB) {
  const double f = 0.01, b = 0.02;
  for (int stages : {2, 3, 4}) {
    const Profile p = Uniform(stages, f, b);
    for (int micro_batches : {1, 4, 8}) {
      for (ScheduleKind schedule : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
        auto in = Input(p, stages, 1, micro_batches, 1, schedule);
        Result<Prediction> got = Simulate(in);
        ASSERT_TRUE(got.ok()) << got.status().message();
        const double m = micro_batches, pp = stages;
        EXPECT_NEAR(got->step_s, (m + pp - 1) * (f + b), 1e-9)
            << ScheduleName(schedule) << " P" << stages;
        EXPECT_NEAR(got->bubble_fraction, (pp - 1) / (m + pp - 1), 1e-9) << ScheduleName(schedule);
      }
    }
  }
}

// ZB-H1 with F = B = W = u (a backward of 2u, half of it the weights'): a stage's M (F + B + W)
// of work plus (P - 1)(F + B - W) of bubble (Qi et al., 2024), against 1F1B's (M + P - 1) 3u.
TEST(Simulator, ZbH1BubbleMatchesTheClosedForm) {
  const double u = 0.01;
  for (auto [stages, micro_batches] : {std::pair{2, 4}, {2, 8}, {3, 6}, {4, 8}}) {
    Profile p = Uniform(stages, u, 2 * u);
    for (auto& seg : p.machines[0].segments) {
      for (SegmentCost& c : seg.costs) c.weight_s = u;
    }
    const double m = micro_batches, pp = stages;
    Result<Prediction> zb = Simulate(Input(p, stages, 1, micro_batches, 1, ScheduleKind::kZbH1));
    ASSERT_TRUE(zb.ok()) << zb.status().message();
    EXPECT_NEAR(zb->step_s, m * 3 * u + (pp - 1) * u, 1e-9) << "P" << stages << " M" << m;
    Result<Prediction> one = Simulate(Input(p, stages, 1, micro_batches, 1, ScheduleKind::k1F1B));
    ASSERT_TRUE(one.ok()) << one.status().message();
    EXPECT_NEAR(one->step_s, (m + pp - 1) * 3 * u, 1e-9);
  }
}

// Two chunks per rank, each half a stage (one segment of F = u, B = 2u): interleaved idles
// (P - 1)/2 of a stage's F + B where 1F1B idles P - 1 (Narayanan et al., 2021); ZB-V with
// W = u fills more of it than interleaved, with free messages and the V's turn in memory.
TEST(Simulator, InterleavedAndZbVBubblesMatchTheClosedForms) {
  const double u = 0.01;
  for (auto [stages, micro_batches] : {std::pair{2, 4}, {2, 8}, {3, 6}, {4, 8}}) {
    Profile p = Uniform(2 * stages, u, 2 * u);
    const double m = micro_batches, pp = stages;
    const double stage_fb = 2 * 3 * u;  // two segments' F + B
    Result<Prediction> one = Simulate(Input(p, stages, 1, micro_batches, 1, ScheduleKind::k1F1B));
    ASSERT_TRUE(one.ok()) << one.status().message();
    EXPECT_NEAR(one->step_s, (m + pp - 1) * stage_fb, 1e-9);
    Result<Prediction> interleaved =
        Simulate(Input(p, stages, 1, micro_batches, 1, ScheduleKind::kInterleaved));
    ASSERT_TRUE(interleaved.ok()) << interleaved.status().message();
    EXPECT_NEAR(interleaved->step_s, m * stage_fb + (pp - 1) * stage_fb / 2, 1e-9)
        << "P" << stages << " M" << m;
    EXPECT_NEAR(interleaved->bubble_fraction, (pp - 1) / 2 / (m + (pp - 1) / 2), 1e-9);
    for (auto& seg : p.machines[0].segments) {
      for (SegmentCost& c : seg.costs) c.weight_s = u;
    }
    Result<Prediction> zb_v = Simulate(Input(p, stages, 1, micro_batches, 1, ScheduleKind::kZbV));
    ASSERT_TRUE(zb_v.ok()) << zb_v.status().message();
    EXPECT_LT(zb_v->step_s, interleaved->step_s - u / 2) << "P" << stages << " M" << m;
    EXPECT_GE(zb_v->step_s, m * stage_fb - 1e-9);
  }
  // Three chunks per rank, from a partition of 3P ranges: the bubble a third of a stage's.
  {
    const Profile three = Uniform(6, u, 2 * u);
    SimulationInput in = Input(three, 2, 1, 4, 1, ScheduleKind::kInterleaved);
    in.candidate.partition = {1, 1, 1, 1, 1, 1};
    Result<Prediction> got = Simulate(in);
    ASSERT_TRUE(got.ok()) << got.status().message();
    const double stage_fb = 3 * 3 * u;
    EXPECT_NEAR(got->step_s, 4 * stage_fb + stage_fb / 3, 1e-9);
  }
  // At P = 2, M = 4: 25 units of 24 of work (mitra/planner/schedule.h).
  Profile p = Uniform(4, u, 2 * u);
  for (auto& seg : p.machines[0].segments) {
    for (SegmentCost& c : seg.costs) c.weight_s = u;
  }
  Result<Prediction> zb_v = Simulate(Input(p, 2, 1, 4, 1, ScheduleKind::kZbV));
  ASSERT_TRUE(zb_v.ok()) << zb_v.status().message();
  EXPECT_NEAR(zb_v->step_s, 25 * u, 1e-9);
}

TEST(Simulator, ActivationMemoryFollowsTheSchedule) {
  const int64_t graph = 1000;
  const Profile p = Uniform(4, 0.01, 0.02, graph);
  const int64_t fixed = 2 * 400;  // parameters and gradients of the stage's one segment
  auto memory = [&](ScheduleKind schedule, bool recompute) {
    auto in = Input(p, 4, 1, 8, 1, schedule);
    in.candidate.recompute = recompute;
    return Simulate(in)->memory_bytes;
  };
  // GPipe keeps every micro-batch's graph; 1F1B at most P - s; recomputation only inputs
  // (64 bytes each) and one graph at a time. Each holds, besides, the receives posted ahead
  // (64 bytes each): a gradient's from its activations' send to its backward (but on the last
  // stage), and the next two activation messages (but on the first).
  EXPECT_EQ(memory(ScheduleKind::kGPipe, false)[0], fixed + 8 * graph + 8 * 64);
  for (int s = 0; s < 4; ++s) {
    const int64_t in_flight = 4 - s;
    EXPECT_EQ(memory(ScheduleKind::k1F1B, false)[s],
              fixed + in_flight * graph + (s > 0 ? in_flight * 64 + 2 * 64 : 0) +
                  (s < 3 ? in_flight * 64 : 0))
        << "stage " << s;
  }
  EXPECT_EQ(memory(ScheduleKind::k1F1B, true)[0], fixed + graph + 4 * 64);
  EXPECT_EQ(memory(ScheduleKind::kVaruna, false)[1], fixed + 3 * 64 + graph + 3 * 64 + 2 * 64);
}

TEST(Simulator, ProcessesOnOneMachineShareItsCores) {
  // Two replicas on one machine whose processes run at half speed when both compute.
  const Profile p = Uniform(1, 0.01, 0.02, 1000, {1.0, 0.5});
  auto shared = Input(p, 1, 2, 8, 1, ScheduleKind::k1F1B, {"m0", "m0"});
  auto apart = Input(p, 1, 2, 8, 1, ScheduleKind::k1F1B);
  EXPECT_NEAR(Simulate(apart)->step_s, 4 * 0.03, 1e-9);
  EXPECT_NEAR(Simulate(shared)->step_s, 2 * 4 * 0.03, 1e-9);
  // A 2-stage pipeline on one such machine: the stages overlap only part of the time, so the
  // step lies between the two bounds.
  const Profile two = Uniform(2, 0.01, 0.02, 1000, {1.0, 0.5});
  const double pipelined =
      Simulate(Input(two, 2, 1, 4, 1, ScheduleKind::k1F1B, {"m0", "m0"}))->step_s;
  EXPECT_GT(pipelined, 5 * 0.03);
  EXPECT_LT(pipelined, 2 * 5 * 0.03);
}

TEST(Simulator, TheAllReduceOverlapsTheLastBackward) {
  Profile p = Uniform(1, 0.01, 0.02);
  p.allreduce = {Allreduce(0.0, 400 / 0.05)};  // the stage's 400 gradient bytes take 50 ms
  auto in = Input(p, 1, 2, 4, 1, ScheduleKind::k1F1B);
  in.bucket_bytes = 1 << 20;  // one bucket: it starts when the last backward ends
  EXPECT_NEAR(Simulate(in)->step_s, 2 * 0.03 + 0.05, 1e-9);
  in.bucket_bytes = 100;  // four buckets: all but the last overlap the backward
  EXPECT_NEAR(Simulate(in)->step_s, 0.03 + 0.01 + std::max(0.05, 0.02 + 0.05 / 4), 1e-9);
}

TEST(Simulator, UnderZeroOneEachReplicaUpdatesItsShareThenTheSharesAreBroadcast) {
  Profile p = Uniform(2, 0.01, 0.02);
  for (SegmentProfile& segment : p.machines[0].segments) {
    segment.update_s = 0.1;
    segment.optimizer_bytes = 800;
  }
  p.allreduce = {Allreduce(0.0, 800 / 0.06)};  // the stage's 800 parameter bytes: 60 ms
  auto in = Input(p, 1, 2, 4, 1, ScheduleKind::k1F1B);
  const Prediction whole = *Simulate(in);
  in.candidate.zero = true;
  const Prediction sharded = *Simulate(in);
  // One segment's update instead of two, and half an all-reduce of the stage's parameters.
  EXPECT_NEAR(sharded.step_s - whole.step_s, -0.1 + 0.06 / 2, 1e-9);
  EXPECT_EQ(whole.max_memory_bytes - sharded.max_memory_bytes, 800);
}

TEST(Simulator, WritesAChromeTraceOfTheStep) {
  const Profile p = Uniform(2, 0.01, 0.02);
  auto in = Input(p, 2, 1, 2, 1, ScheduleKind::k1F1B);
  in.trace = true;
  const std::string trace = Simulate(in)->trace;
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"F1\""), std::string::npos);
  EXPECT_NE(trace.find("rank 1 (stage 1, replica 0)"), std::string::npos);
}

// `p` with a machine "slow" whose every computation takes `factor` times m0's.
Profile WithSlowMachine(Profile p, double factor, const std::string& address = "slow") {
  MachineProfile slow = p.machines[0];
  slow.address = address;
  for (SegmentProfile& segment : slow.segments) {
    for (SegmentCost& c : segment.costs) {
      c.forward_s *= factor;
      c.forward_nograd_s *= factor;
      c.backward_s *= factor;
    }
  }
  p.machines.push_back(slow);
  return p;
}

// Two replicas, one on a machine 2.5 times slower: even shares of 14 micro-batches wait for
// the slow one (7 x 2.5 x 30 ms); 10 and 4 finish together (10 x 30 ms = 4 x 75 ms).
TEST(Simulator, UnevenSharesLetTheFasterReplicaTakeMore) {
  const Profile p = WithSlowMachine(Uniform(1, 0.01, 0.02), 2.5);
  auto in = Input(p, 1, 2, 14, 1, ScheduleKind::k1F1B, {"m0", "slow"});
  const Result<Prediction> even = Simulate(in);
  ASSERT_TRUE(even.ok()) << even.status().message();
  EXPECT_NEAR(even->step_s, 7 * 2.5 * 0.03, 1e-9);
  EXPECT_NEAR(even->replica_phase_s[0], 7 * 0.03, 1e-9);
  in.candidate.shares = {10, 4};
  const Result<Prediction> uneven = Simulate(in);
  ASSERT_TRUE(uneven.ok()) << uneven.status().message();
  EXPECT_NEAR(uneven->step_s, 10 * 0.03, 1e-9);
  EXPECT_EQ(in.candidate.ToString(), "1 x 2, micro-batch 1, 1f1b, partition 1, shares 10,4");
  in.candidate.shares = {10, 3};
  EXPECT_NE(Simulate(in).status().message().find("14 in all"), std::string::npos);
}

// The planner gives the fast machine's replica the larger share: 1.75 times the even shape's
// speed, faster too than the fast machine alone (14 x 30 ms).
TEST(Planner, OnMachinesThatDifferTheReplicasShareTheBatchByTheirSpeed) {
  const Profile p = WithSlowMachine(Uniform(1, 0.01, 0.02), 2.5);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 14;
  request.chunk_size = 1;
  request.machines = {{"m0", 1}, {"slow", 1}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const PlannedShape& best = plan->candidates.front();
  EXPECT_EQ(best.candidate.shares, (Shares{10, 4})) << best.candidate.ToString();
  EXPECT_NEAR(best.prediction.step_s, 0.3, 1e-9);
  double even = 0;
  for (const PlannedShape& s : plan->candidates) {
    if (s.candidate.replicas == 2 && !Uneven(s.candidate.shares)) even = s.prediction.step_s;
  }
  EXPECT_NEAR(even, 0.525, 1e-9);
  // Like machines keep even shares: nothing uneven is even considered.
  const Profile like = Uniform(1, 0.01, 0.02);
  request.profile = &like;
  request.machines = {{"m0", 1}, {"m1", 1}};
  plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const PlannedShape& s : plan->candidates) {
    EXPECT_FALSE(Uneven(s.candidate.shares)) << s.candidate.ToString();
  }
}

// The planner also lets the ranks fill the machines fastest first, and fastest and slowest
// alternating; on like machines (or unknown ones, costed as the first) only in list order.
TEST(MachineOrders, FastestFirstAndAlternatingWhereMachinesDiffer) {
  const Profile p =
      WithSlowMachine(WithSlowMachine(Uniform(1, 0.01, 0.02), 2.5), 1.5, "mid");
  const std::vector<MachineSlots> list = {{"slow", 1}, {"m0", 1}, {"mid", 2}, {"m1", 1}};
  EXPECT_EQ(MachineOrders(p, list),
            (std::vector<std::vector<int>>{{0, 1, 2, 3}, {1, 3, 2, 0}, {1, 0, 3, 2}}));
  const std::vector<double> speeds = RelativeSpeeds(p, list);
  ASSERT_EQ(speeds.size(), 4u);
  EXPECT_NEAR(speeds[0], 0.4, 1e-12);
  EXPECT_NEAR(speeds[2], 1 / 1.5, 1e-12);
  EXPECT_EQ(MachineOrders(p, {{"m0", 1}, {"m1", 2}, {"m2", 1}}),
            (std::vector<std::vector<int>>{{0, 1, 2}}));
  // Two machines already fastest first: no other order.
  EXPECT_EQ(MachineOrders(p, {{"m0", 1}, {"slow", 1}}), (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_EQ(InOrder(list, {1, 3, 2, 0})[2].address, "mid");
  EXPECT_EQ(InOrder(list, {}).front().address, "slow");
}

// A batch of one micro-batch has one replica: listed first, the slow machine would run it; the
// plan runs it on the fast one and leaves the slow one idle, and the shape policy places it so.
TEST(Planner, AShapeThatLeavesSlotsIdleLeavesTheSlowestMachines) {
  const auto p = std::make_shared<const Profile>(WithSlowMachine(Uniform(1, 0.01, 0.02), 2.5));
  PlanRequest request;
  request.profile = p.get();
  request.global_batch = 1;
  request.chunk_size = 1;
  request.machines = {{"slow", 1}, {"m0", 1}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->candidates.size(), 2u);
  EXPECT_EQ(plan->candidates[0].machine_order, (std::vector<int>{1, 0}));
  EXPECT_NEAR(plan->candidates[0].prediction.step_s, 0.03, 1e-9);
  EXPECT_TRUE(plan->candidates[1].machine_order.empty()) << "list order";
  EXPECT_NEAR(plan->candidates[1].prediction.step_s, 0.075, 1e-9);

  const PlannedShapePolicy policy(p);
  ShapeRequest shape;
  shape.machines = request.machines;
  shape.segments = 1;
  shape.global_batch = 1;
  shape.chunk_size = 1;
  Result<GridPlan> grid = policy.Plan(shape);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  ASSERT_EQ(grid->ranks.size(), 1u);
  EXPECT_EQ(grid->ranks[0].machine, 1) << "m0, by its index in the list";
  EXPECT_EQ(grid->ranks[0].local_rank, 0);
  ASSERT_EQ(grid->expected_compute_s.size(), 1u);
  EXPECT_NEAR(grid->expected_compute_s[0], 0.03, 1e-12);
  EXPECT_NEAR(grid->predicted_step_s, 0.03, 1e-9);
}

// Four machines, two 2.5 times slower, listed slow first, two stages of two segments with one
// micro-batch: in list order the pipeline runs on the slow pair; the plan puts it on the fast.
TEST(Planner, APipelineRunsOnTheFastestMachinesWhenItLeavesOthersIdle) {
  const Profile p = WithSlowMachine(WithSlowMachine(Uniform(2, 0.01, 0.02), 2.5), 2.5, "slow2");
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 1;
  request.chunk_size = 1;
  request.stages = 2;
  request.machines = {{"slow", 1}, {"slow2", 1}, {"m0", 1}, {"m1", 1}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const PlannedShape& best = plan->candidates.front();
  ASSERT_EQ(best.machine_order.size(), 4u) << best.candidate.ToString();
  EXPECT_EQ(std::vector<int>(best.machine_order.begin(), best.machine_order.begin() + 2),
            (std::vector<int>{2, 3}));
  int in_list_order = 0;
  for (const PlannedShape& s : plan->candidates) {
    if (!s.machine_order.empty()) continue;
    ++in_list_order;
    EXPECT_GT(s.prediction.step_s, 2 * best.prediction.step_s) << s.candidate.ToString();
  }
  EXPECT_GT(in_list_order, 0);
}

// Two pipelines of two stages over eight segments, the second on a fast machine and one three
// times slower (the fourth of four machines). Cut 4,4 like the first, its slow stage takes
// 4 x 3 x 30 ms a micro-batch; cut 6,2 for its machines, 6 x 30 = 2 x 3 x 30 ms: the replica
// runs its micro-batches twice as fast, and the first replica is unchanged.
TEST(Simulator, APipelineCutForItsMachinesRunsAsFastAsTheyAllow) {
  const Profile p = WithSlowMachine(Uniform(8, 0.01, 0.02), 3);
  auto in = Input(p, 2, 2, 8, 1, ScheduleKind::kGPipe, {"m1", "m2", "m3", "slow"});
  const Result<Prediction> alike = Simulate(in);
  ASSERT_TRUE(alike.ok()) << alike.status().message();
  in.candidate.pipelines = {{4, 4}, {6, 2}};
  EXPECT_EQ(in.candidate.PartitionText(), "4,4/6,2");
  const Result<Prediction> cut = Simulate(in);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  // GPipe over M = 4 micro-batches: the fast stage's first forward (4 x 10 ms), the slow
  // stage's 4 forwards and backwards (4 x 4 x 3 x 30 ms), the fast stage's last backward
  // (4 x 20 ms); cut for the machines, (M + P - 1) x each stage's 6 x 30 ms.
  EXPECT_NEAR(alike->replica_phase_s[1], 0.04 + 4 * 4 * 3 * 0.03 + 0.08, 1e-9);
  EXPECT_NEAR(cut->replica_phase_s[1], 5 * 6 * 0.03, 1e-9);
  EXPECT_NEAR(cut->replica_phase_s[0], alike->replica_phase_s[0], 1e-12);
  EXPECT_LT(cut->step_s, 0.6 * alike->step_s);
  // A list of counts per replica, each a split of the segments.
  in.candidate.pipelines = {{4, 4}};
  EXPECT_NE(Simulate(in).status().message().find("one list of counts for each of the 2 replicas"),
            std::string::npos);
  in.candidate.pipelines = {{4, 4}, {6, 3}};
  EXPECT_NE(Simulate(in).status().message().find("does not split the 8 segments"),
            std::string::npos);
}

// The planner cuts each pipeline for its machines where they differ: with one slow machine of
// four and two stages (under 1F1B: interleaved's chunks of one segment each cannot be cut
// another way), the pipeline that has it gives its fast stage more segments.
TEST(Planner, EachPipelineIsCutForItsMachines) {
  const Profile p = WithSlowMachine(Uniform(8, 0.01, 0.02), 3);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 8;
  request.chunk_size = 1;
  request.stages = 2;
  request.schedules = {ScheduleKind::k1F1B};
  request.machines = {{"m0", 1}, {"m1", 1}, {"m2", 1}, {"slow", 1}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const PlannedShape& best = plan->candidates.front();
  ASSERT_EQ(best.candidate.replicas, 2) << best.candidate.ToString();
  ASSERT_EQ(best.candidate.pipelines.size(), 2u) << best.candidate.ToString();
  // The slow machine runs the last rank (list order) or a first stage (another order): in its
  // pipeline, its stage holds fewer segments than the fast one's.
  const std::vector<std::string> machines =
      PlaceRanks(InOrder(request.machines, best.machine_order), 4);
  for (int d = 0; d < 2; ++d) {
    for (int s = 0; s < 2; ++s) {
      if (machines[2 * d + s] != "slow") continue;
      EXPECT_LT(best.candidate.pipelines[d][s], best.candidate.pipelines[d][1 - s])
          << best.candidate.ToString();
    }
  }
  // One partition for both would be slower.
  SimulationInput in;
  in.profile = &p;
  in.global_batch = 8;
  in.candidate = best.candidate;
  in.candidate.pipelines.clear();
  in.rank_machines = machines;
  for (const std::vector<int>& one : best.candidate.pipelines) {
    in.candidate.partition = one;
    for (bool even : {false, true}) {
      if (even) in.candidate.shares.clear();
      const Result<Prediction> alike = Simulate(in);
      ASSERT_TRUE(alike.ok()) << alike.status().message();
      EXPECT_GT(alike->step_s, 1.1 * best.prediction.step_s) << in.candidate.ToString();
    }
  }
}

TEST(Simulator, BadShapesAreRefusedWithTheReason) {
  const Profile p = Uniform(4, 0.01, 0.02);
  auto in = Input(p, 2, 1, 8, 1, ScheduleKind::k1F1B);
  in.candidate.partition = {3, 3};
  EXPECT_NE(Simulate(in).status().message().find("does not split the 4 segments"),
            std::string::npos);
  auto wide = Input(p, 1, 3, 4, 2, ScheduleKind::k1F1B);  // 2 micro-batches for 3 replicas
  EXPECT_NE(Simulate(wide).status().message().find("cannot feed 3 replicas"), std::string::npos);
  auto chunks = Input(p, 2, 1, 8, 1, ScheduleKind::kZbV);
  chunks.candidate.partition = {2, 2};  // zb-v cuts 2 stages into 4 ranges
  EXPECT_NE(Simulate(chunks).status().message().find("into 4 ranges (2 stages under zb-v)"),
            std::string::npos)
      << Simulate(chunks).status().message();
  auto odd = Input(p, 2, 1, 3, 1, ScheduleKind::kInterleaved);  // 3 micro-batches over 2 stages
  EXPECT_NE(Simulate(odd).status().message().find("a multiple of the 2 stages"), std::string::npos);
}

TEST(Planner, BalancedPartitionEvensOutStageTimes) {
  EXPECT_EQ(BalancedPartition({1, 1, 1, 1, 4}, {1, 1}), (std::vector<int>{4, 1}));
  EXPECT_EQ(BalancedPartition({1, 1, 1, 1}, {1, 1, 1, 1}), (std::vector<int>{1, 1, 1, 1}));
  // A stage on a machine twice as fast takes twice the work.
  EXPECT_EQ(BalancedPartition({1, 1, 1, 1, 1, 1}, {2, 1}), (std::vector<int>{4, 2}));
}

// With free messages interleaved's bubble shrinks with v, (P - 1)/v of a stage's F + B: the
// planner ranks v = 4 (the most it tries) over 3 over 2, 24 segments giving each an even cut,
// on a machine whose two processes compute at full speed together.
TEST(Planner, InterleavedWithMoreChunksPerRankWinsWhereMessagesAreFree) {
  const Profile p = Uniform(24, 0.01, 0.02, /*graph=*/1000, /*speed=*/{1.0, 1.0});
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 8;
  request.machines = {{"m0", 2}};
  request.stages = 2;
  request.chunk_size = 2;
  request.schedules = {ScheduleKind::kInterleaved};
  request.keep = 3;
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_GE(plan->candidates.size(), 3u);
  std::vector<size_t> ranges;
  std::vector<double> steps;
  for (size_t i = 0; i < 3; ++i) {
    ranges.push_back(plan->candidates[i].candidate.partition.size());
    steps.push_back(plan->candidates[i].prediction.step_s);
  }
  EXPECT_EQ(ranges, (std::vector<size_t>{8, 6, 4}));
  // The compute of a rank is 4 micro-batches of 12 segments' F + B; the bubble (P - 1)/v of
  // a stage's F + B of one micro-batch.
  const double stage = 12 * (0.01 + 0.02);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(steps[i], 4 * stage + stage / static_cast<double>(ranges[i] / 2), 1e-9)
        << ranges[i] << " ranges";
  }
}

// The straggler detector judges a rank against the compute its plan expects of it: under a
// schedule of several chunks per rank, every chunk's segments count (each rank runs 12 of the
// 24 segments, in 2 or more chunks, on 4 micro-batches).
TEST(PlannedShapePolicy, EachRankIsExpectedToComputeEveryChunkItRuns) {
  const auto p = std::make_shared<const Profile>(
      Uniform(24, 0.01, 0.02, /*graph=*/1000, /*speed=*/{1.0, 1.0}));
  const PlannedShapePolicy policy(p, /*stages=*/2);
  ShapeRequest request;
  request.machines = {{"m0", 2}};
  request.segments = 24;
  request.global_batch = 8;
  request.chunk_size = 2;
  Result<GridPlan> plan = policy.Plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_TRUE(plan->schedule == ScheduleKind::kInterleaved || plan->schedule == ScheduleKind::kZbV)
      << plan->partition;
  ASSERT_EQ(plan->expected_compute_s.size(), 2u) << plan->partition;
  for (const double expected : plan->expected_compute_s) {
    EXPECT_NEAR(expected, 4 * 12 * (0.01 + 0.02), 1e-9) << plan->partition;
  }
}

TEST(Planner, EveryCandidateIsAShapeTheRuntimeAcceptsAndFitsMemory) {
  Profile p = Uniform(4, 0.01, 0.02);
  p.machines[0].slots = 4;
  p.machines[0].memory_bytes = 4 * (2 * 400 + 3 * 1000);  // room for 3 graphs per rank or so
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 16;
  request.machines = {{"m0", 4}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_GT(plan->too_big, 0);
  ASSERT_FALSE(plan->candidates.empty());
  double previous = 0;
  for (const PlannedShape& s : plan->candidates) {
    const Candidate& c = s.candidate;
    EXPECT_GE(s.prediction.step_s, previous);
    previous = s.prediction.step_s;
    int total = 0;
    for (int n : c.partition) total += n;
    EXPECT_EQ(total, 4) << c.ToString();
    EXPECT_LE(c.stages * c.replicas, 4);
    EXPECT_GE((16 + c.chunk_size - 1) / c.chunk_size, c.replicas) << c.ToString();
    // Every rank is on m0: together they fit its memory.
    int64_t used = 0;
    for (int64_t bytes : s.prediction.memory_bytes) used += bytes;
    EXPECT_LE(used, p.machines[0].memory_bytes) << c.ToString();
    // The shape is one the launcher plans as is.
    GridRequest grid;
    grid.slots_per_machine = {4};
    grid.stages = c.stages;
    grid.replicas = c.replicas;
    grid.segments = 4;
    grid.global_batch = 16;
    grid.chunk_size = static_cast<int>(c.chunk_size);
    Result<GridPlan> launched = PlanGrid(grid);
    ASSERT_TRUE(launched.ok()) << c.ToString() << ": " << launched.status().message();
    EXPECT_EQ(launched->replicas, c.replicas) << c.ToString();
    EXPECT_TRUE(launched->idle_reason.empty()) << c.ToString();
  }
}

// A machine whose memory holds one copy of the optimizer state but not two: two replicas fit
// only with ZeRO-1 (each keeps half), and they are faster than one process, so the plan shards
// the state. Asked not to (--zero 0), the planner drops the shape; ZeRO-1 is never chosen where
// the state fits without it.
TEST(Planner, ZeroOneIsChosenWhereAShapeFitsOnlyWithIt) {
  Profile p = Uniform(4, 0.01, 0.02, 1000, {1.0, 0.95});
  for (SegmentProfile& segment : p.machines[0].segments) {
    segment.optimizer_bytes = 1000000;
    for (SegmentCost& c : segment.costs) {  // work grows with the samples
      c.forward_s *= c.micro_batch;
      c.forward_nograd_s *= c.micro_batch;
      c.backward_s *= c.micro_batch;
    }
  }
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 8;
  request.machines = {{"m0", 2}};
  request.stages = 1;
  request.keep = 0;
  Result<PlanResult> roomy = PlanShapes(request);
  ASSERT_TRUE(roomy.ok()) << roomy.status().message();
  EXPECT_EQ(roomy->candidates.front().candidate.replicas, 2);
  EXPECT_FALSE(roomy->candidates.front().candidate.zero) << "chosen where the state fits";

  p.machines[0].memory_bytes = 5000000;  // one process's state (4 MB) and its activations
  Result<PlanResult> tight = PlanShapes(request);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  const Candidate& best = tight->candidates.front().candidate;
  EXPECT_EQ(best.replicas, 2);
  EXPECT_TRUE(best.zero);
  EXPECT_NE(best.ToString().find(", ZeRO-1, "), std::string::npos) << best.ToString();
  EXPECT_LT(tight->candidates.front().prediction.max_memory_bytes, 2500000);
  // This profile's update and broadcasts cost nothing: as fast as without, faster than 1 x 1.
  EXPECT_NEAR(tight->candidates.front().prediction.step_s,
              roomy->candidates.front().prediction.step_s, 1e-12);
  for (const PlannedShape& s : tight->candidates) {
    if (s.candidate.replicas == 1) {
      EXPECT_GT(s.prediction.step_s, tight->candidates.front().prediction.step_s);
    }
  }

  request.zero = false;
  Result<PlanResult> refused = PlanShapes(request);
  ASSERT_TRUE(refused.ok()) << refused.status().message();
  for (const PlannedShape& s : refused->candidates) EXPECT_EQ(s.candidate.replicas, 1);
}

TEST(Planner, AFixedMicroBatchOrDepthIsKept) {
  const Profile p = Uniform(4, 0.01, 0.02);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 16;
  request.machines = {{"m0", 2}, {"m1", 2}};
  request.chunk_size = 2;
  request.stages = 2;
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const PlannedShape& s : plan->candidates) {
    EXPECT_EQ(s.candidate.chunk_size, 2);
    EXPECT_EQ(s.candidate.stages, 2);
  }
}

TEST(Planner, BadRequestsSayWhatIsMissing) {
  PlanRequest none;
  EXPECT_NE(PlanShapes(none).status().message().find("run `mitra profile` first"),
            std::string::npos);
  const Profile p = Uniform(4, 0.01, 0.02);
  PlanRequest deep;
  deep.profile = &p;
  deep.global_batch = 8;
  deep.machines = {{"m0", 8}};
  deep.stages = 5;
  EXPECT_NE(PlanShapes(deep).status().message().find("more than the 4 segments"),
            std::string::npos);
  PlanRequest big_chunk = deep;
  big_chunk.stages = 0;
  big_chunk.chunk_size = 16;
  EXPECT_NE(PlanShapes(big_chunk).status().message().find("give --chunk-size 8 or less"),
            std::string::npos)
      << PlanShapes(big_chunk).status().message();
  PlanRequest too_deep = deep;
  too_deep.stages = 3;
  too_deep.machines = {{"m0", 2}};
  EXPECT_NE(PlanShapes(too_deep).status().message().find("2 slots with --nstages 3"),
            std::string::npos)
      << PlanShapes(too_deep).status().message();
}

TEST(Planner, ABatchSmallerThanTheSlotsLeavesSlotsIdleRatherThanEmptyReplicas) {
  const Profile p = Uniform(4, 0.01, 0.02);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 3;
  request.machines = {{"m0", 8}};
  Result<PlanResult> plan = PlanShapes(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  bool uses_every_sample = false;
  for (const PlannedShape& c : plan->candidates) {
    EXPECT_LE(c.candidate.replicas, 3) << c.candidate.ToString();
    uses_every_sample |= c.candidate.replicas == 3 && c.idle_slots >= 5;
  }
  EXPECT_TRUE(uses_every_sample) << "no shape of 3 replicas, one sample each";
}

TEST(Profile, RoundTripsThroughJsonAndInterpolatesBetweenSizes) {
  Profile p = Uniform(2, 0.01, 0.02);
  p.program = "/bin/train";
  p.program_args = {"--model", "tiny"};
  p.machines[0].segments[0].costs = {{1, 0.01, 0.008, 0.02, 64, 100}, {4, 0.04, 0.03, 0.08, 256, 400}};
  p.links[0].send_samples = {{1024, 0.0002}, {1 << 20, 0.0004}};
  p.links[0].send_latency_s = 0.0002;
  p.links[0].send_bytes_per_s = 5e9;
  Result<Profile> back = Profile::FromJson(p.ToJson(), "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ToJson(), p.ToJson());
  EXPECT_NEAR(back->SendSeconds("m0", "m1", 1000000000), 0.2002, 1e-12);
  EXPECT_EQ(back->SendSeconds("m0", "m0", 1000), 0);  // the link within m0 measured no sends
  const SegmentCost c = back->CostAt(back->machines[0], 0, 2);
  EXPECT_NEAR(c.forward_s, 0.02, 1e-12);
  EXPECT_EQ(c.output_bytes, 128);
  EXPECT_NEAR(back->CostAt(back->machines[0], 0, 8).backward_s, 0.16, 1e-12);  // extrapolated
  EXPECT_NE(back->SegmentsCsv().find("m0,s0,4,0.04,0.03,0.08,256,400,100,0"), std::string::npos);
  EXPECT_NE(Profile::FromJson("{}", "p.json").status().message().find("p.json is not a valid profile"),
            std::string::npos);
}

TEST(Profile, ANumberThatFitsNoIntegerIsRefusedNotCast) {
  const std::string good = Uniform(1, 0.01, 0.02).ToJson();
  ASSERT_TRUE(Profile::FromJson(good, "p.json").ok());
  for (const char* bad : {"1e26", "-1e30", "2.5", "9223372036854775808"}) {
    std::string text = good;
    const size_t at = text.find("\"memory_bytes\":");
    ASSERT_NE(at, std::string::npos);
    const size_t value = at + std::string("\"memory_bytes\":").size();
    text.replace(value, text.find_first_of(",}", value) - value, bad);
    Result<Profile> p = Profile::FromJson(text, "p.json");
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("expected a whole number that fits"), std::string::npos)
        << p.status().message();
  }
}

TEST(Profile, RingAllReduceExtendsTheMeasuredGroups) {
  Profile p = Uniform(1, 0, 0);
  p.allreduce = {Allreduce(0.001, 1e9)};
  EXPECT_NEAR(p.AllreduceSeconds(2, 1000000), 0.001 + 0.001, 1e-12);
  // 4 processes: 2 rounds of latency (halving and doubling), 1.5 times the volume of 2.
  EXPECT_NEAR(p.AllreduceSeconds(4, 1000000), 0.002 + 0.0015, 1e-12);
  EXPECT_EQ(p.AllreduceSeconds(1, 1000000), 0);
  const auto [latency, bandwidth] = FitLatencyBandwidth({{1000, 0.0011}, {2000, 0.0012}});
  EXPECT_NEAR(latency, 0.001, 1e-9);
  EXPECT_NEAR(bandwidth, 1e7, 1);
}

}  // namespace
}  // namespace mitra::planner
