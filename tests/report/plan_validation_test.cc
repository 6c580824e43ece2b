// `mitra plan --validate` (report/plan_validation.h) on a run directory in memory: what it
// reads, what it compares, what it says when something is missing.
#include "report/plan_validation.h"

#include <gtest/gtest.h>

#include "contract/step_trace.h"
#include "records/records.h"
#include "tests/common/memory_file_system.h"
#include "tests/planner/uniform_profile.h"

namespace mitra::report {
namespace {

class PlanValidationTest : public ::testing::Test {
 protected:
  // Generation 0 of a 2 x 1 job over 4 segments, 5 steps, with a profile beside it.
  void SetUp() override {
    records::Launch launch;
    launch.shape.generation = 0;
    launch.shape.stages = 2;
    launch.shape.replicas = 1;
    launch.shape.world_size = 2;
    launch.shape.global_batch = 8;
    launch.shape.chunk_size = 4;
    launch.machines = {"m0", "m0"};
    records::Settings settings;
    settings.text = "1f1b";
    settings.schedule = "1f1b";
    settings.partition = "2,2";
    std::string events = Event(records::Launch::kEvent, records::ToJson(launch)) +
                         Event(records::Settings::kEvent, records::ToJson(settings));
    fs_.AddFile("run/events.jsonl", events);
    std::string metrics;
    for (const double step_s : {0.9, 0.5, 0.30, 0.20, 0.25}) {  // the first two: warm-up
      records::StepMetrics m;
      m.step = ++steps_;
      m.loss = 1;
      m.step_time_s = step_s;
      metrics += records::ToJson(m).ToJson() + "\n";
    }
    fs_.AddFile("run/metrics.jsonl", metrics);
    ASSERT_TRUE(fs_.CreateDirectories("run/profile").ok());
    fs_.AddFile("run/profile/profile.json", planner::Uniform(4, 0.010, 0.020).ToJson());
  }

  static std::string Event(const char* name, JsonObject fields) {
    JsonObject o;
    o.SetNumber("time", 100).SetString("event", name);
    for (const auto& [key, value] : fields.fields()) o.Set(key, value);
    return o.ToJson() + "\n";
  }

  // Rank `rank`'s traced step: a forward and a backward of `compute_s` each, a receive between.
  void Trace(int rank, int stage, double compute_s) {
    contract::TracedStep t;
    t.rank = rank;
    t.stage = stage;
    t.step_start_us = 1e6;
    t.spans = {{"F0", 1e6, compute_s * 1e6}, {"Ra1", 1e6 + compute_s * 1e6, 500},
               {"B0", 1.1e6, compute_s * 1e6}};
    fs_.AddFile("run/" + records::StepTraceFile(0, rank), contract::StepTraceJson(t));
  }

  int64_t steps_ = 0;
  testing::MemoryFileSystem fs_;
};

TEST_F(PlanValidationTest, ComparesTheStepAndEachStagesComputeWithThePrediction) {
  // Each rank's stage is its trace's (here not rank % stages).
  Trace(0, 1, 0.060);
  Trace(1, 0, 0.040);
  Result<PlanValidation> v = ValidatePlan(fs_, "run", -1, "run/profile");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->generation, 0);
  EXPECT_EQ(v->shape.stages, 2);
  EXPECT_EQ(v->measured_steps, 3u);
  EXPECT_DOUBLE_EQ(v->measured_step_s, 0.25);  // median of 0.30, 0.20, 0.25
  EXPECT_GT(v->predicted_step_s, 0);
  EXPECT_EQ(v->traced_ranks, 2);
  EXPECT_NEAR(v->measured.compute_by_stage[0].total_s, 0.080, 1e-9);
  EXPECT_NEAR(v->measured.compute_by_stage[1].total_s, 0.120, 1e-9);
  EXPECT_EQ(v->measured.by_kind.at("F").count, 2);
  EXPECT_EQ(v->measured.by_kind.at("Ra").count, 2) << "receives are kinds too, not compute";
  EXPECT_GT(v->predicted.compute_by_stage[1].total_s, 0);
  const std::string text = FormatPlanValidation(*v);
  EXPECT_EQ(text.rfind("mitra plan: generation 0 of run: ", 0), 0u) << text;
  EXPECT_NE(text.find("measured 250.0 ms (median of 3 steps)"), std::string::npos) << text;
  EXPECT_NE(text.find("    stage 1  predicted "), std::string::npos) << text;
  EXPECT_NE(text.find(" ms  measured 120.0 ms  "), std::string::npos) << text;
}

// A run whose pipelines were cut each its own way is predicted with each one's partition: on
// like machines "2,2/1,3" waits for the second pipeline's stage of 3 segments (4 micro-batches
// of 3 x 30 ms), "2,2" does not (5 x 2 x 30 ms).
TEST_F(PlanValidationTest, EachPipelinesOwnPartitionIsPredicted) {
  const auto predicted = [&](const std::string& partition) {
    records::Launch launch;
    launch.shape.stages = 2;
    launch.shape.replicas = 2;
    launch.shape.world_size = 4;
    launch.shape.global_batch = 16;
    launch.shape.chunk_size = 2;
    launch.machines = {"m0", "m1", "m2", "m3"};
    records::Settings settings;
    settings.text = "1f1b";
    settings.schedule = "1f1b";
    settings.partition = partition;
    fs_.AddFile("run/events.jsonl",
                Event(records::Launch::kEvent, records::ToJson(launch)) +
                    Event(records::Settings::kEvent, records::ToJson(settings)));
    Result<PlanValidation> v = ValidatePlan(fs_, "run", 0, "run/profile");
    EXPECT_TRUE(v.ok()) << v.status().message();
    return v.ok() ? v->predicted_step_s : 0.0;
  };
  const double alike = predicted("2,2"), cut = predicted("2,2/1,3");
  EXPECT_GT(alike, 0);
  EXPECT_GT(cut, 1.2 * alike);
  EXPECT_DOUBLE_EQ(predicted("1,3/2,2"), cut);
}

TEST_F(PlanValidationTest, WithoutTracesTheStepAloneIsCompared) {
  Result<PlanValidation> v = ValidatePlan(fs_, "run", 0, "run/profile/profile.json");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->traced_ranks, 0);
  EXPECT_NE(FormatPlanValidation(*v).find(
                "(no step traces in logs/gen-0: only local workers write them)"),
            std::string::npos);
}

TEST_F(PlanValidationTest, WhatIsMissingIsNamed) {
  Result<PlanValidation> v = ValidatePlan(fs_, "run", 3, "run/profile");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "run/events.jsonl records no launch of generation 3: give the run directory of a "
            "job that ran");
  v = ValidatePlan(fs_, "run", 0, "elsewhere");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "no profile at elsewhere: write one with `mitra profile --out elsewhere ...`");
  fs_.AddFile("run/events.jsonl", Event(records::Launch::kEvent, JsonObject()));
  v = ValidatePlan(fs_, "run", -1, "run/profile");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("records no settings of its workers"), std::string::npos);
}

}  // namespace
}  // namespace mitra::report
