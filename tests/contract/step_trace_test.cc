// A rank's traced step (contract/step_trace.h): the worker's writing reads back, which spans
// are compute, and text that is no trace.
#include "contract/step_trace.h"

#include <gtest/gtest.h>

namespace mitra::contract {
namespace {

TEST(StepTrace, OneRuleForCompute) {
  for (const char* compute : {"F0", "f12", "R3", "B1", "Bi2", "W3", "update"}) {
    EXPECT_TRUE(IsComputeSpan(compute)) << compute;
  }
  // Receives, sends and the reduction are waits: a recompute is R and a digit, a receive Ra/Rg.
  for (const char* wait : {"Ra0", "Rg2", "Sa1", "Sg0", "reduce", "R", ""}) {
    EXPECT_FALSE(IsComputeSpan(wait)) << wait;
  }
}

TEST(StepTrace, ReadsBackTheStepItWrote) {
  TracedStep written;
  written.rank = 5;
  written.stage = 1;
  written.replica = 2;
  written.step_start_us = 1000;
  written.spans = {{"Ra0", 1000, 5000}, {"F0", 6000, 10000}, {"B\"0", 16000, 15000},
                   {"reduce", 31000, 15000}, {"update", 46000, 5000}};
  const std::optional<TracedStep> read = ParseStepTrace(StepTraceJson(written));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->rank, 5);
  EXPECT_EQ(read->stage, 1);
  EXPECT_EQ(read->replica, 2);
  EXPECT_EQ(read->step_start_us, 1000);
  ASSERT_EQ(read->spans.size(), written.spans.size());
  EXPECT_EQ(read->spans[2].name, "B\"0");
  EXPECT_EQ(read->spans[3].start_us, 31000);
  EXPECT_EQ(read->spans[3].duration_us, 15000);
  // F0, the backward and update are compute (30 ms); Ra0 and reduce are waits, the rest of the
  // 50 ms from the step's start to the update's end.
  EXPECT_NEAR(read->ComputeSeconds(), 0.030, 1e-12);
  EXPECT_NEAR(read->WaitSeconds(), 0.020, 1e-12);
}

TEST(StepTrace, TextThatIsNoTraceIsNone) {
  EXPECT_FALSE(ParseStepTrace("{\"traceEv").has_value());
  EXPECT_FALSE(ParseStepTrace("[]").has_value());
  EXPECT_FALSE(ParseStepTrace(R"({"traceEvents":7})").has_value());
  const std::optional<TracedStep> odd =
      ParseStepTrace(R"({"traceEvents":[3,{"ph":"X","name":"F1","dur":"x","args":[]}]})");
  ASSERT_TRUE(odd.has_value());
  ASSERT_EQ(odd->spans.size(), 1u);
  EXPECT_EQ(odd->spans[0].duration_us, 0);
}

// A trace an older mitra wrote: its place in the thread's name only, and (another program's)
// spans without the step's start, which then starts at the span.
TEST(StepTrace, AnOlderTraceIsReadToo) {
  const std::optional<TracedStep> read = ParseStepTrace(
      R"x({"traceEvents":[{"name":"thread_name","ph":"M","args":{"name":"rank 3 (stage 1, replica 1)"}},)x"
      R"({"name":"F0","ph":"X","ts":2000,"dur":1000}]})");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->rank, 3);
  EXPECT_EQ(read->stage, 1);
  EXPECT_EQ(read->replica, 1);
  EXPECT_EQ(read->step_start_us, 2000);
  EXPECT_NEAR(read->WallSeconds(), 0.001, 1e-12);
  EXPECT_EQ(read->WaitSeconds(), 0);
}

}  // namespace
}  // namespace mitra::contract
