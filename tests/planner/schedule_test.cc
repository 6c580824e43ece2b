#include "mitra/planner/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

namespace mitra::planner {
namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                      ScheduleKind::kVaruna, ScheduleKind::kZbH1,
                                      ScheduleKind::kInterleaved, ScheduleKind::kZbV};

std::vector<std::vector<Instruction>> Lists(const ChunkLayout& layout, ScheduleKind kind, int mbs,
                                            bool recompute) {
  std::vector<std::vector<Instruction>> lists;
  for (int s = 0; s < layout.stages; ++s) {
    lists.push_back(BuildSchedule(kind, layout, s, mbs, recompute));
  }
  return lists;
}

// Replays the lists of all positions the way the runtime executes them (receives block, sends
// do not), each message keyed by the virtual stage that sends it, and reports whether every
// position reaches its end. With `costs` (F, B, W of a chunk; a whole B is B + W) the time each
// instruction ends is kept and `makespan` set: the step's length with free messages.
// `ranges`: the partition's (interleaved's v = ranges / P); 0: the schedule's default.
bool RunsToCompletion(ScheduleKind kind, int stages, int mbs, bool recompute,
                      std::array<double, 3> costs = {1, 1, 1}, double* makespan = nullptr,
                      int ranges = 0) {
  const ChunkLayout layout = LayoutOf(kind, stages, ranges);
  const auto lists = Lists(layout, kind, mbs, recompute);
  std::vector<size_t> pc(stages, 0);
  std::vector<double> clock(stages, 0);
  std::map<std::pair<int, int>, double> sent_act, sent_grad;  // (virtual stage, micro-batch)
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (pc[s] < lists[s].size()) {
        const Instruction& ins = lists[s][pc[s]];
        const int j = layout.VirtualStage(s, ins.chunk);
        if (ins.op == Op::kRecvActivations) {
          auto it = sent_act.find({j - 1, ins.micro_batch});
          if (it == sent_act.end()) break;
          clock[s] = std::max(clock[s], it->second);
        }
        if (ins.op == Op::kRecvGradients) {
          auto it = sent_grad.find({j + 1, ins.micro_batch});
          if (it == sent_grad.end()) break;
          clock[s] = std::max(clock[s], it->second);
        }
        if (ins.op == Op::kForward || ins.op == Op::kForwardDiscard) clock[s] += costs[0];
        if (ins.op == Op::kBackward) clock[s] += costs[1] + costs[2];
        if (ins.op == Op::kBackwardInput) clock[s] += costs[1];
        if (ins.op == Op::kBackwardWeight) clock[s] += costs[2];
        if (ins.op == Op::kSendActivations) sent_act[{j, ins.micro_batch}] = clock[s];
        if (ins.op == Op::kSendGradients) sent_grad[{j, ins.micro_batch}] = clock[s];
        ++pc[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (pc[s] != lists[s].size()) return false;
  }
  if (makespan != nullptr) *makespan = *std::max_element(clock.begin(), clock.end());
  return true;
}

TEST(Schedule, EveryScheduleRunsToCompletionWithoutDeadlock) {
  for (auto kind : kAllKinds) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 9; ++m) {
        if (kind == ScheduleKind::kInterleaved && !InterleavedFits(p, m)) continue;
        for (bool rc : {false, true}) {
          EXPECT_TRUE(RunsToCompletion(kind, p, m, rc))
              << ScheduleName(kind) << " P=" << p << " M=" << m << " recompute=" << rc;
        }
      }
    }
  }
  for (int v : {3, 4}) {  // interleaved with more chunks, from the partition's counts
    for (int p = 1; p <= 4; ++p) {
      for (int m = p; m <= 8; m += p) {
        EXPECT_TRUE(RunsToCompletion(ScheduleKind::kInterleaved, p, m, false, {1, 1, 1}, nullptr,
                                     v * p))
            << "v=" << v << " P=" << p << " M=" << m;
      }
    }
  }
}

// ... and a zero-bubble schedule's W of each micro-batch once, after its B: in each chunk.
TEST(Schedule, EachMicroBatchIsForwardedOnceAndBackwardedOnceAfterItsForward) {
  for (auto kind : kAllKinds) {
    const int chunks = LayoutOf(kind, 4).chunks;
    const bool split = kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbV;
    for (int s = 0; s < 4; ++s) {
      auto list = BuildSchedule(kind, 4, s, 8, false);
      std::vector<int> forwards(8 * chunks, 0), backwards(8 * chunks, 0), weights(8 * chunks, 0);
      for (const auto& ins : list) {
        ASSERT_LT(ins.chunk, chunks);
        const int k = ins.chunk * 8 + ins.micro_batch;
        if (ins.op == Op::kForward || ins.op == Op::kForwardDiscard) ++forwards[k];
        if (ins.op == Op::kBackward || ins.op == Op::kBackwardInput) {
          EXPECT_EQ(forwards[k], 1) << "backward before forward";
          ++backwards[k];
        }
        if (ins.op == Op::kBackwardWeight) {
          EXPECT_EQ(backwards[k], 1) << "W before B";
          ++weights[k];
        }
      }
      EXPECT_EQ(forwards, std::vector<int>(8 * chunks, 1)) << ScheduleName(kind);
      EXPECT_EQ(backwards, std::vector<int>(8 * chunks, 1)) << ScheduleName(kind);
      EXPECT_EQ(weights, std::vector<int>(8 * chunks, split ? 1 : 0)) << ScheduleName(kind);
    }
  }
}

// Megatron's interleaved order: P = 2, M = 4, two chunks. Position 1 holds virtual stages 1 and
// 3, the last: its chunk 1 sends nothing on and receives no gradient.
TEST(Schedule, InterleavedAtTwoStagesAndFourMicroBatches) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kInterleaved, 2, 0, 4, false)),
            "F0 Sa0 F1 Sa1 Ra0.1 F0.1 Sa0.1 Ra1.1 F1.1 Sa1.1 F2 Sa2 Rg0.1 B0.1 Sg0.1 "
            "F3 Sa3 Rg1.1 B1.1 Sg1.1 Ra2.1 F2.1 Sa2.1 Rg0 B0 Ra3.1 F3.1 Sa3.1 Rg1 B1 "
            "Rg2.1 B2.1 Sg2.1 Rg3.1 B3.1 Sg3.1 Rg2 B2 Rg3 B3");
  EXPECT_EQ(InterleavedFits(2, 4), true);
  EXPECT_EQ(InterleavedFits(2, 3), false);
  EXPECT_TRUE(BuildSchedule(ScheduleKind::kInterleaved, 2, 0, 3, false).empty());
}

// The bubbles the lists leave with free messages, against their closed forms: 1F1B idles P-1
// of a stage's F + B; interleaved (P-1)/v of it; at unit costs ZB-H1 and ZB-V idle less.
TEST(Schedule, BubblesMatchTheirClosedForms) {
  const std::array<double, 3> unit{1, 1, 1};  // a chunk's F, B and W
  for (int p : {2, 3, 4}) {
    for (int m : {4, 8, 12}) {
      if (!InterleavedFits(p, m)) continue;
      double one_f_one_b = 0, interleaved = 0, zb_v = 0;
      // 1F1B's stage is both chunks of the interleaved one: twice the cost.
      ASSERT_TRUE(RunsToCompletion(ScheduleKind::k1F1B, p, m, false, {2, 2, 2}, &one_f_one_b));
      ASSERT_TRUE(RunsToCompletion(ScheduleKind::kInterleaved, p, m, false, unit, &interleaved));
      ASSERT_TRUE(RunsToCompletion(ScheduleKind::kZbV, p, m, false, unit, &zb_v));
      const double work = 6.0 * m;  // per position
      EXPECT_DOUBLE_EQ(one_f_one_b, work + (p - 1) * 6.0) << "P=" << p << " M=" << m;
      EXPECT_DOUBLE_EQ(interleaved, work + (p - 1) * 6.0 / 2) << "P=" << p << " M=" << m;
      EXPECT_LT(zb_v, interleaved) << "P=" << p << " M=" << m;
    }
  }
  double zb_v = 0;
  ASSERT_TRUE(RunsToCompletion(ScheduleKind::kZbV, 2, 4, false, unit, &zb_v));
  EXPECT_DOUBLE_EQ(zb_v, 25);  // of 24 units of work (schedule.h)
  // v chunks of one unit's F each: a stage's F + B is 3v, and interleaved idles (P-1)/v of it.
  for (int v : {2, 3, 4}) {
    for (auto [p, m] : {std::pair{2, 4}, {3, 6}, {4, 8}}) {
      double got = 0;
      ASSERT_TRUE(
          RunsToCompletion(ScheduleKind::kInterleaved, p, m, false, unit, &got, v * p));
      EXPECT_DOUBLE_EQ(got, 3.0 * v * m + (p - 1) * 3.0 * v / v) << "v=" << v << " P=" << p;
    }
  }
  EXPECT_EQ(LayoutOf(ScheduleKind::kInterleaved, 2, 6).chunks, 3);
  EXPECT_EQ(LayoutOf(ScheduleKind::kInterleaved, 2, 5).chunks, 2);  // no v: the default
  EXPECT_FALSE(InterleavedRanges(2, 5));
  EXPECT_FALSE(InterleavedRanges(2, 2));
  EXPECT_EQ(LayoutOf(ScheduleKind::kZbV, 2, 6).chunks, 2);
}

// Every order of two stages' F, B and W over M = 4 micro-batches (F's, B's and W's each in
// micro-batch order, a micro-batch's F before its B before its W, at most `held` forwarded and
// not yet W'd on a stage), as (op, micro-batch) lists.
using Order = std::vector<std::pair<Op, int>>;
void Orders(int m, int held, int f, int b, int w, Order& order, std::vector<Order>& out) {
  if (w == m) {
    out.push_back(order);
    return;
  }
  const std::array<std::tuple<Op, bool, int*>, 3> moves = {
      std::tuple{Op::kForward, f < m && f - w < held, &f},
      std::tuple{Op::kBackwardInput, b < f, &b}, std::tuple{Op::kBackwardWeight, w < b, &w}};
  for (const auto& [op, allowed, count] : moves) {
    if (!allowed) continue;
    order.push_back({op, *count});
    ++*count;
    Orders(m, held, f, b, w, order, out);
    --*count;
    order.pop_back();
  }
}

// Two stages running `orders` with free messages: the step's length; -1 when they deadlock.
double TwoStageMakespan(const std::array<const Order*, 2>& orders, std::array<double, 3> costs) {
  std::array<size_t, 2> pc{0, 0};
  std::array<double, 2> clock{0, 0};
  std::map<std::tuple<Op, int, int>, double> done;  // (F or B, stage, micro-batch) -> its end
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < 2; ++s) {
      while (pc[s] < orders[s]->size()) {
        const auto [op, mb] = (*orders[s])[pc[s]];
        std::optional<std::tuple<Op, int, int>> need;
        if (op == Op::kForward && s == 1) need = {Op::kForward, 0, mb};
        if (op == Op::kBackwardInput) {
          need = s == 0 ? std::tuple{Op::kBackwardInput, 1, mb} : std::tuple{Op::kForward, 1, mb};
        }
        if (need && !done.count(*need)) break;
        clock[s] = std::max(clock[s], need ? done[*need] : 0.0) +
                   costs[op == Op::kForward ? 0 : op == Op::kBackwardInput ? 1 : 2];
        if (op != Op::kBackwardWeight) done[{op, s, mb}] = clock[s];
        ++pc[s];
        progress = true;
      }
    }
  }
  if (pc[0] < orders[0]->size() || pc[1] < orders[1]->size()) return -1;
  return std::max(clock[0], clock[1]);
}

// At P = 2 and M = 4, zb-h1's lists take as long as the best of every order that holds at most
// two micro-batches' activations on a stage, for B and W equal or not: so where B exceeds W (the
// bench GPT's F 24.3, B 28.6, W 16.3 ms, docs/performance.md) no order closes more of the bubble.
TEST(Schedule, ZbH1AtTwoStagesIsTheBestOrderForAnyCosts) {
  std::vector<Order> orders;
  Order scratch;
  Orders(4, 2, 0, 0, 0, scratch, orders);
  ASSERT_EQ(orders.size(), 89u);
  // The check can fail: each W right after its B (1F1B's order, split) is a unit slower.
  const Op F = Op::kForward, B = Op::kBackwardInput, W = Op::kBackwardWeight;
  const Order fill = {{F, 0}, {F, 1}, {B, 0}, {W, 0}, {F, 2}, {B, 1},
                      {W, 1}, {F, 3}, {B, 2}, {W, 2}, {B, 3}, {W, 3}};
  const Order one_f_one_b = {{F, 0}, {B, 0}, {W, 0}, {F, 1}, {B, 1}, {W, 1},
                             {F, 2}, {B, 2}, {W, 2}, {F, 3}, {B, 3}, {W, 3}};
  EXPECT_DOUBLE_EQ(TwoStageMakespan({&fill, &one_f_one_b}, {1, 1, 1}), 14);
  for (const std::array<double, 3>& costs : std::vector<std::array<double, 3>>{
           {1, 1, 1}, {24.3, 28.6, 16.3}, {1, 2, 1}, {1, 1, 0.5}, {2, 1, 1}, {1, 1, 2}}) {
    SCOPED_TRACE(std::to_string(costs[0]) + ", " + std::to_string(costs[1]) + ", " +
                 std::to_string(costs[2]));
    double generated = 0;
    ASSERT_TRUE(RunsToCompletion(ScheduleKind::kZbH1, 2, 4, false, costs, &generated));
    double best = std::numeric_limits<double>::infinity();
    for (const Order& first : orders) {
      for (const Order& second : orders) {
        const double makespan = TwoStageMakespan({&first, &second}, costs);
        if (makespan >= 0) best = std::min(best, makespan);
      }
    }
    EXPECT_NEAR(generated, best, 1e-9);
  }
  // The bench GPT's costs: 4 (F + B + W) of work in 313.4, a busy share of 0.883.
  double bench = 0;
  ASSERT_TRUE(RunsToCompletion(ScheduleKind::kZbH1, 2, 4, false, {24.3, 28.6, 16.3}, &bench));
  EXPECT_NEAR(bench, 313.4, 1e-9);
}

// The most micro-batches a list holds at once: between F and B (their activations), between B
// and W (their weight-gradient stashes), and between F and W (either).
struct Held {
  int forwarded = 0, stashed = 0, in_flight = 0;
};
Held PeakHeld(const std::vector<Instruction>& list) {
  Held now, peak;
  for (const Instruction& ins : list) {
    if (ins.op == Op::kForward || ins.op == Op::kForwardDiscard) ++now.forwarded, ++now.in_flight;
    if (ins.op == Op::kBackwardInput) --now.forwarded, ++now.stashed;
    if (ins.op == Op::kBackwardWeight) --now.stashed, --now.in_flight;
    peak = {std::max(peak.forwarded, now.forwarded), std::max(peak.stashed, now.stashed),
            std::max(peak.in_flight, now.in_flight)};
  }
  return peak;
}

// ZB-V: the V's layout, and its bounds: at most 2P chunk forwards await their B and 2P B's
// their W on every position.
TEST(Schedule, ZbVRunsAVAndKeepsItsBounds) {
  const ChunkLayout v = LayoutOf(ScheduleKind::kZbV, 3);
  EXPECT_EQ(v.VirtualStage(0, 0), 0);
  EXPECT_EQ(v.VirtualStage(2, 0), 2);
  EXPECT_EQ(v.VirtualStage(2, 1), 3);
  EXPECT_EQ(v.VirtualStage(0, 1), 5);
  for (int j = 0; j < v.num_virtual_stages(); ++j) {
    EXPECT_EQ(v.VirtualStage(v.StageOf(j), v.ChunkOf(j)), j);
  }
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    const Held held = PeakHeld(BuildSchedule(ScheduleKind::kZbV, p, s, m, false));
    EXPECT_LE(held.forwarded, 2 * p) << "position " << s;
    EXPECT_LE(held.stashed, 2 * p) << "position " << s;
  }
  // More than 1F1B's first stage (2P chunk micro-batches between F and W): at P = 2, M = 4 the
  // two positions hold up to 6 and 7 (docs/performance.md, zb-v's memory).
  EXPECT_EQ(PeakHeld(BuildSchedule(ScheduleKind::kZbV, 2, 0, 4, false)).in_flight, 6);
  EXPECT_EQ(PeakHeld(BuildSchedule(ScheduleKind::kZbV, 2, 1, 4, false)).in_flight, 7);
  const ChunkLayout interleaved = LayoutOf(ScheduleKind::kInterleaved, 3);
  EXPECT_EQ(interleaved.VirtualStage(1, 1), 4);
  EXPECT_EQ(interleaved.StageOf(4), 1);
}

// ZB-H1 holds what 1F1B holds on its first stage, P micro-batches between F and W, on every
// stage: on stage s, P - s between F and B (1F1B's own bound there); a B turns one of them into
// a stash, of which s wait for their W besides the one just made.
TEST(Schedule, ZbH1HoldsOneFOneBsFirstStageOnEveryStage) {
  for (int p = 2; p <= 6; ++p) {
    for (int m = 1; m <= 9; ++m) {
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE("P " + std::to_string(p) + ", M " + std::to_string(m) + ", stage " +
                     std::to_string(s));
        const Held held = PeakHeld(BuildSchedule(ScheduleKind::kZbH1, p, s, m, false));
        EXPECT_EQ(held.forwarded, std::min(p - s, m));
        EXPECT_LE(held.stashed, s + 1);
        EXPECT_LE(held.in_flight, p);
      }
    }
  }
  // The check can fail: a first stage that runs its next F before the W it could run (the
  // order of a lockstep that prefers F to W) holds three micro-batches at P = 2.
  const Op F = Op::kForward, B = Op::kBackwardInput, W = Op::kBackwardWeight;
  const std::vector<Instruction> f_first = {{F, 0}, {F, 1}, {B, 0}, {F, 2}, {B, 1},
                                            {W, 0}, {W, 1}, {B, 2}, {W, 2}};
  EXPECT_EQ(PeakHeld(f_first).in_flight, 3);
}

// With free messages a ZB-H1 step takes M (F + B + W) of work plus (P - 1)(F + B - W), the
// bubble of Qi et al. (2024), for any costs whose W is at most B: the W's each stage keeps back
// fill its drain as they would in a schedule holding more.
TEST(Schedule, ZbH1StepIsTheClosedFormForAnyCosts) {
  for (const std::array<double, 3>& c : std::vector<std::array<double, 3>>{
           {1, 1, 1}, {24.3, 28.6, 16.3}, {1, 2, 1}, {1, 1, 0.5}, {2, 1, 1}}) {
    for (int p = 2; p <= 6; ++p) {
      for (int m = p; m <= 9; ++m) {
        double makespan = 0;
        ASSERT_TRUE(RunsToCompletion(ScheduleKind::kZbH1, p, m, false, c, &makespan));
        EXPECT_NEAR(makespan, m * (c[0] + c[1] + c[2]) + (p - 1) * (c[0] + c[1] - c[2]), 1e-9)
            << "P " << p << ", M " << m << ", F " << c[0] << ", B " << c[1] << ", W " << c[2];
      }
    }
  }
}

// Unit costs, P = 2, M = 4: the W's fill the first stage's wait for its last gradient.
TEST(Schedule, ZbH1AtTwoStagesAndFourMicroBatches) {
  EXPECT_EQ(ToString(BuildSchedule(ScheduleKind::kZbH1, 2, 0, 4, false)),
            "F0 Sa0 F1 Sa1 Rg0 Bi0 W0 F2 Sa2 Rg1 Bi1 W1 F3 Sa3 Rg2 Bi2 W2 Rg3 Bi3 W3");
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
  EXPECT_NE(kind.status().message().find("gpipe, 1f1b, varuna, zb-h1, interleaved or zb-v"),
            std::string::npos);
  EXPECT_EQ(*ParseScheduleKind("varuna"), ScheduleKind::kVaruna);
}

}  // namespace
}  // namespace mitra::planner
