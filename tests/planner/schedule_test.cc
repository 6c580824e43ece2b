#include "planner/schedule.h"

#include <gtest/gtest.h>

#include <set>

namespace mitra::planner {
namespace {

// Replays the lists of all stages the way the runtime executes them (receives block, sends do
// not) and reports whether every stage reaches its end.
bool RunsToCompletion(ScheduleKind kind, int stages, int mbs, bool recompute) {
  std::vector<std::vector<Instruction>> lists;
  for (int s = 0; s < stages; ++s) lists.push_back(BuildSchedule(kind, stages, s, mbs, recompute));
  std::vector<size_t> pc(stages, 0);
  std::set<std::pair<int, int>> sent_act, sent_grad;  // (from stage, micro-batch)
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (pc[s] < lists[s].size()) {
        const Instruction& ins = lists[s][pc[s]];
        if (ins.op == Op::kRecvActivations && !sent_act.count({s - 1, ins.micro_batch})) break;
        if (ins.op == Op::kRecvGradients && !sent_grad.count({s + 1, ins.micro_batch})) break;
        if (ins.op == Op::kSendActivations) sent_act.insert({s, ins.micro_batch});
        if (ins.op == Op::kSendGradients) sent_grad.insert({s, ins.micro_batch});
        ++pc[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (pc[s] != lists[s].size()) return false;
  }
  return true;
}

TEST(Schedule, EveryScheduleRunsToCompletionWithoutDeadlock) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kVaruna,
                    ScheduleKind::kZbH1}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 9; ++m) {
        for (bool rc : {false, true}) {
          EXPECT_TRUE(RunsToCompletion(kind, p, m, rc))
              << ScheduleName(kind) << " P=" << p << " M=" << m << " recompute=" << rc;
        }
      }
    }
  }
}

// ... and a zero-bubble schedule's W of each micro-batch once, after its B.
TEST(Schedule, EachMicroBatchIsForwardedOnceAndBackwardedOnceAfterItsForward) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kVaruna,
                    ScheduleKind::kZbH1}) {
    for (int s = 0; s < 4; ++s) {
      auto list = BuildSchedule(kind, 4, s, 6, false);
      std::vector<int> forwards(6, 0), backwards(6, 0), weights(6, 0);
      for (const auto& ins : list) {
        if (ins.op == Op::kForward || ins.op == Op::kForwardDiscard) ++forwards[ins.micro_batch];
        if (ins.op == Op::kBackward || ins.op == Op::kBackwardInput) {
          EXPECT_EQ(forwards[ins.micro_batch], 1) << "backward before forward";
          ++backwards[ins.micro_batch];
        }
        if (ins.op == Op::kBackwardWeight) {
          EXPECT_EQ(backwards[ins.micro_batch], 1) << "W before B";
          ++weights[ins.micro_batch];
        }
      }
      EXPECT_EQ(forwards, std::vector<int>(6, 1));
      EXPECT_EQ(backwards, std::vector<int>(6, 1));
      EXPECT_EQ(weights, std::vector<int>(6, kind == ScheduleKind::kZbH1 ? 1 : 0));
    }
  }
}

// ZB-H1 keeps 1F1B's bound on forwarded micro-batches awaiting their B, and at most P
// weight-gradient stashes.
TEST(Schedule, ZbH1KeepsOneFOneBsInFlightBoundAndAtMostPStashes) {
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    int in_flight = 0, peak = 0, stashed = 0, peak_stashed = 0;
    for (const auto& ins : BuildSchedule(ScheduleKind::kZbH1, p, s, m, false)) {
      if (ins.op == Op::kForward) peak = std::max(peak, ++in_flight);
      if (ins.op == Op::kBackwardInput) --in_flight, peak_stashed = std::max(peak_stashed, ++stashed);
      if (ins.op == Op::kBackwardWeight) --stashed;
    }
    EXPECT_EQ(peak, p - s) << "stage " << s;
    EXPECT_LE(peak_stashed, p) << "stage " << s;
  }
}

// Unit costs, P = 2, M = 4: the W's fill the first stage's wait for its last gradient.
TEST(Schedule, ZbH1AtTwoStagesAndFourMicroBatches) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kZbH1, 2, 0, 4, false)),
            "F0 Sa0 F1 Sa1 Rg0 Bi0 F2 Sa2 Rg1 Bi1 W0 F3 Sa3 Rg2 Bi2 W1 W2 Rg3 Bi3 W3");
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kZbH1, 2, 1, 4, false)),
            "Ra0 F0 Bi0 Sg0 Ra1 F1 Bi1 Sg1 W0 Ra2 F2 Bi2 Sg2 W1 Ra3 F3 Bi3 Sg3 W2 W3");
}

TEST(Schedule, GPipeRunsAllForwardsBeforeAnyBackward) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kGPipe, 2, 0, 2, false)),
            "F0 Sa0 F1 Sa1 Rg0 B0 Rg1 B1");
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kGPipe, 2, 1, 2, false)),
            "Ra0 F0 Ra1 F1 B0 Sg0 B1 Sg1");
}

TEST(Schedule, OneFOneBKeepsAtMostPMinusSMicroBatchesInFlight) {
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    int in_flight = 0, peak = 0;
    for (const auto& ins : BuildSchedule(ScheduleKind::k1F1B, p, s, m, false)) {
      if (ins.op == Op::kForward) peak = std::max(peak, ++in_flight);
      if (ins.op == Op::kBackward) --in_flight;
    }
    EXPECT_EQ(peak, p - s) << "stage " << s;
  }
}

TEST(Schedule, VarunaRecomputesJustInTimeBeforeWaitingForTheGradient) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kVaruna, 2, 0, 2, false)),
            "f0 Sa0 f1 Sa1 R0 Rg0 B0 R1 Rg1 B1");
  // The last stage keeps its graph: its backward follows its forward directly.
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kVaruna, 2, 1, 2, false)),
            "Ra0 F0 B0 Sg0 Ra1 F1 B1 Sg1");
}

TEST(Schedule, RecomputeWithOneFOneBWaitsForTheGradientFirst) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::k1F1B, 2, 0, 1, true)), "f0 Sa0 Rg0 R0 B0");
}

TEST(Schedule, ForwardOnlyReceivesForwardsAndSendsEachMicroBatch) {
  EXPECT_EQ(ToString(BuildForwardOnlySchedule(3, 0, 2)), "f0 Sa0 f1 Sa1");
  EXPECT_EQ(ToString(BuildForwardOnlySchedule(3, 1, 2)), "Ra0 f0 Sa0 Ra1 f1 Sa1");
  EXPECT_EQ(ToString(BuildForwardOnlySchedule(3, 2, 1)), "Ra0 f0");
  EXPECT_EQ(ToString(BuildForwardOnlySchedule(1, 0, 0)), "");
}

TEST(Schedule, UnknownScheduleNamesTheChoices) {
  auto kind = ParseScheduleKind("pipedream");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("gpipe, 1f1b, varuna or zb-h1"), std::string::npos);
  EXPECT_EQ(*ParseScheduleKind("varuna"), ScheduleKind::kVaruna);
}

}  // namespace
}  // namespace mitra::planner
