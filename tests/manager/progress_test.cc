#include "manager/progress.h"

#include <gtest/gtest.h>

#include <utility>
#include <variant>

namespace mitra::manager {
namespace {

StepRecord Step(int64_t step, double tokens_per_s, double step_time_s = 0.5) {
  StepRecord r;
  r.step = step;
  r.loss = 10.0 / static_cast<double>(step);
  r.tokens_per_s = tokens_per_s;
  r.step_time_s = step_time_s;
  return r;
}

TEST(Progress, FormatsCounts) {
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(12345.6), "12,346");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
}

TEST(Progress, FormatsTheStepLine) {
  StepRecord r = Step(12, 12345, 0.52);
  r.loss = 2.34561;
  EXPECT_EQ(FormatProgressLine(r, 100, 45.0),
            "step 12/100  loss 2.3456  12,345 tokens/s  0.52 s/step  ETA 0:45");
  EXPECT_EQ(FormatProgressLine(r, 0, std::nullopt),
            "step 12  loss 2.3456  12,345 tokens/s  0.52 s/step");
}

// A worker's message of the kind `Message`, from its JSON.
template <class Message>
std::pair<Message, JsonObject> Read(const char* json) {
  Result<contract::ReadMessage> read = contract::ParseWorkerMessage(json);
  EXPECT_TRUE(read.ok()) << read.status().message();
  if (!read.ok()) return {};
  return {std::get<Message>(read->message), read->more};
}

TEST(Progress, ReadsStepRecords) {
  const StepRecord r = StepRecord::Of(
      Read<contract::message::Step>(R"({"event":"step","step":3,"loss":1.5,"tokens_per_s":100})")
          .first);
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.loss, 1.5);
  EXPECT_EQ(r.step_time_s, 0);
  EXPECT_EQ(r.Throughput(), 100);
}

TEST(Progress, SamplesPerSecondLeftOutAreTheSamplesOverTheStepsTime) {
  const StepRecord r = StepRecord::Of(Read<contract::message::Step>(
      R"({"event":"step","step":4,"loss":0.5,"samples":64,"step_time_s":0.2})").first);
  EXPECT_EQ(r.samples_per_s, 320);
}

TEST(Progress, ProgramsWithoutTokensAreShownInSamplesPerSecond) {
  const StepRecord r = StepRecord::Of(Read<contract::message::Step>(
      R"({"event":"step","step":4,"loss":0.5,"samples":64,"samples_per_s":320,"step_time_s":0.2})")
          .first);
  EXPECT_EQ(FormatProgressLine(r, 0, std::nullopt),
            "step 4  loss 0.5000  320 samples/s  0.20 s/step");
  StepStats stats;
  stats.Add(r, 0);
  EXPECT_EQ(FormatSummary(4, 1, stats), "4 steps in 0:01, final loss 0.5000, mean 320 samples/s");
}

TEST(Progress, FormatsEvaluations) {
  const auto [eval, metrics] = Read<contract::message::Eval>(
      R"({"event":"eval","step":100,"samples":10000,"loss":0.41234,"accuracy":0.85123,"seconds":2.14})");
  EXPECT_EQ(FormatEvalLine(eval, metrics),
            "eval after step 100: loss 0.4123  accuracy 0.8512  (10,000 samples, 2.1 s)");
}

TEST(Progress, MeanThroughputLeavesOutTheWarmUpStep) {
  StepStats stats;
  EXPECT_EQ(stats.MeanThroughput(), 0);
  stats.Add(Step(1, 10), 0);
  EXPECT_EQ(stats.MeanThroughput(), 10);
  stats.Add(Step(2, 100), 1);
  stats.Add(Step(3, 200), 2);
  EXPECT_EQ(stats.MeanThroughput(), 150);
  EXPECT_EQ(stats.last()->step, 3);
}

TEST(Progress, EtaFollowsTheArrivalPace) {
  StepStats stats;
  EXPECT_EQ(stats.EtaSeconds(10), std::nullopt);
  stats.Add(Step(1, 1, /*step_time_s=*/0.5), 100);
  EXPECT_EQ(stats.EtaSeconds(10), 4.5);  // only the worker's step time so far
  stats.Add(Step(2, 1), 102);
  stats.Add(Step(3, 1), 104);
  EXPECT_EQ(stats.EtaSeconds(10), 14);  // 7 steps x 2 s
  EXPECT_EQ(stats.EtaSeconds(0), std::nullopt);
  EXPECT_EQ(stats.EtaSeconds(2), 0);
}

// Found by fuzz/worker_record_fuzz.cc: a step beyond int64_t was converted to one (a step
// record's own is checked when it is read: contract_test).
TEST(Progress, AnEvaluationsStepBeyondAWholeNumberIsZero) {
  const auto [eval, metrics] =
      Read<contract::message::Eval>(R"({"event":"eval","step":-1e300,"loss":0.5})");
  EXPECT_EQ(FormatEvalLine(eval, metrics).substr(0, 32), "eval after step 0: loss 0.5000  ");
}

}  // namespace
}  // namespace mitra::manager
