// `mitra report` without a browser: the run directory read into a RunReport (run_report.h),
// the page it renders (report_page.h) and the command's errors (report_command.h), all on an
// in-memory file system. tests/report/report_browser_test.cc renders real runs in chromium.
#include "report/run_report.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/clock.h"
#include "common/json.h"
#include "report/report_page.h"
#include "tests/common/memory_file_system.h"
#include "tests/report/recorded_run.h"

namespace mitra::report {
namespace {

using mitra::testing::MemoryFileSystem;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using testing::kRecordedEvents;
using testing::RecordedMetrics;
using testing::RecordedStep;

class RunReportTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs_.CreateDirectories("run").ok()); }

  RunReport Read() {
    Result<RunReport> report = ReadRunReport(fs_, "run");
    EXPECT_TRUE(report.ok()) << report.status().message();
    return report.ok() ? *report : RunReport{};
  }

  std::string Page(const RunReport& report) {
    PageOptions options;
    options.chart_js = "/*! chart.js stand-in */ window.Chart = function () {};";
    options.chart_js_from = "chart.min.js";
    return RenderReportPage(report, options);
  }

  MemoryFileSystem fs_;
};

TEST_F(RunReportTest, ReadsAFinishedRunWithAMorphAFailureAndARecovery) {
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  fs_.AddFile("run/metrics.jsonl", RecordedMetrics());
  const RunReport r = Read();
  EXPECT_TRUE(r.end.finished);
  EXPECT_EQ(r.end.state, "done");
  EXPECT_EQ(r.program, "/bin/train");
  EXPECT_EQ(r.steps.size(), 7u);
  ASSERT_EQ(r.evals.size(), 1u);
  EXPECT_EQ(r.evals[0].accuracy, 0.5);
  ASSERT_EQ(r.generations.size(), 3u);
  EXPECT_EQ(r.generations[0].Shape(), "1 x 2");
  EXPECT_EQ(r.generations[0].first_step, 1);
  EXPECT_EQ(r.generations[0].last_step, 4);
  EXPECT_DOUBLE_EQ(r.generations[0].ended, 103.4);  // its last worker's exit
  EXPECT_EQ(r.generations[2].resume_step, 4);

  ASSERT_EQ(r.changes.size(), 2u);
  EXPECT_EQ(r.changes[0].kind, "morph");
  EXPECT_EQ(r.changes[0].cause, "machine list changed: localhost 2 -> 1 slots");
  EXPECT_DOUBLE_EQ(r.changes[0].stop_s, 0.4);
  EXPECT_DOUBLE_EQ(r.changes[0].relaunch_s, 0.1);
  EXPECT_DOUBLE_EQ(r.changes[0].first_step_s, 0.5);
  EXPECT_DOUBLE_EQ(r.changes[0].detected, 103.0);
  EXPECT_EQ(r.changes[0].state, "checkpoint");
  EXPECT_EQ(r.changes[1].state, "1 kept, 1 from peers (2.5 MB), 0 from the checkpoint");
  EXPECT_EQ(r.changes[1].kind, "recovery");
  EXPECT_EQ(r.changes[1].cause, "rank 0 (pid 7) was killed by signal SIGKILL after step 5");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 0);
  EXPECT_EQ(r.failures[0].step, 5);
  ASSERT_EQ(r.checkpoints.size(), 2u);
  EXPECT_DOUBLE_EQ(r.checkpoints[0].blocked_s, 0.02);
  EXPECT_DOUBLE_EQ(r.checkpoints[0].total_s, 0.05);

  EXPECT_EQ(r.LastStep(), 6);
  EXPECT_EQ(r.RepeatedSteps(), 1);
  EXPECT_EQ(r.Samples(), 6 * 8);  // each step once
  EXPECT_EQ(r.morphs, 1);
  EXPECT_DOUBLE_EQ(r.TotalDowntime(), 3.0);
  EXPECT_NEAR(r.WallSeconds(), 8.1, 1e-9);
  EXPECT_EQ(r.FinalLoss(), 1.5);
  EXPECT_EQ(r.skipped_lines, 0);
}

TEST_F(RunReportTest, AHalfWrittenLastLineIsLeftOutNotAnError) {
  fs_.AddFile("run/events.jsonl", std::string(kRecordedEvents) + R"({"time":109,"event":"sta)");
  fs_.AddFile("run/metrics.jsonl", RecordedMetrics() + R"({"step":7,"loss":1.)");
  const RunReport r = Read();
  EXPECT_EQ(r.steps.size(), 7u);
  EXPECT_EQ(r.LastStep(), 6);
  EXPECT_EQ(r.skipped_lines, 0);
  EXPECT_EQ(r.managers, 1);  // the half-written `start` is not a second manager
}

TEST_F(RunReportTest, ADamagedCompleteLineIsCountedAndSkipped) {
  fs_.AddFile("run/metrics.jsonl", RecordedStep(1, 0, 1, 3.0) + "{\"step\":2,\"lo\x01\n[1,2]\n" +
                                       RecordedStep(3, 0, 3, 2.0) +
                                       "{\"step\":1e300,\"loss\":\"x\",\"samples\":-1e300}\n");
  const RunReport r = Read();
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[2].step, 0);  // values of the wrong type or range read as absent
  EXPECT_EQ(r.steps[2].loss, 0);
  EXPECT_EQ(r.skipped_lines, 2);
  EXPECT_TRUE(Contains(Page(r), "unreadable records"));
}

TEST_F(RunReportTest, ARunningRunShowsWhereItIs) {
  // Cut after the failure: the recovery is still under way.
  const std::string events = kRecordedEvents;
  fs_.AddFile("run/events.jsonl", events.substr(0, events.find("{\"time\":105.1")));
  fs_.AddFile("run/metrics.jsonl", RecordedStep(1, 0, 101.5, 3.0) + RecordedStep(2, 0, 102.0, 2.8));
  fs_.AddFile("run/state.json", R"({
  "state": "recovering",
  "reason": "rank 0 failed",
  "max_steps": 100
})");
  const RunReport r = Read();
  EXPECT_FALSE(r.end.finished);
  EXPECT_EQ(r.end.state, "recovering");
  EXPECT_EQ(r.max_steps, 100);
  EXPECT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.changes.size(), 1u);  // the morph; the recovery has not trained yet
  EXPECT_NEAR(r.WallSeconds(), 5.0, 1e-9);  // first start to the newest record
  const std::string page = Page(r);
  EXPECT_TRUE(Contains(page, "still running"));
  EXPECT_TRUE(Contains(page, "<td>2 of 100</td>"));
  EXPECT_TRUE(Contains(page, "recovering: rank 0 failed"));
}

TEST_F(RunReportTest, ARunWithoutStepsYetStillRenders) {
  fs_.AddFile("run/events.jsonl", R"({"time":100.0,"event":"start","program":"p"})" "\n");
  fs_.AddFile("run/state.json", "{\"state\": \"runn");  // being replaced
  const RunReport r = Read();
  EXPECT_EQ(r.end.state, "running");
  EXPECT_EQ(r.LastStep(), 0);
  EXPECT_TRUE(Contains(Page(r), "no step yet"));
}

TEST_F(RunReportTest, RankStepsAndStragglersAreShownWhenRecorded) {
  fs_.AddFile("run/events.jsonl",
              std::string(kRecordedEvents) +
                  R"({"time":108.0,"event":"straggler","generation":2,"rank":1,"machine":"10.0.0.7","stage":0,"compute_s":0.2,"peer_median_s":0.1,"ratio":2.0,"steps":20})"
                  "\n");
  fs_.AddFile("run/metrics.jsonl", RecordedMetrics());
  fs_.AddFile("run/rank_steps.jsonl",
              R"({"time":106,"generation":2,"rank":0,"stage":0,"step":10,"steps":10,"compute_s":0.1,"wait_s":0.05}
{"time":106,"generation":2,"rank":1,"stage":0,"step":10,"steps":10,"compute_s":0.2,"wait_s":0.01}
{"time":107,"generation":2,"rank":0,"stage":0,"step":40,"steps":30,"compute_s":0.3,"wait_s":0.05}
{"time":107,"generation":2,"rank")");
  const RunReport r = Read();
  EXPECT_EQ(r.rank_source, RankSource::kRankSteps);
  ASSERT_EQ(r.rank_steps.size(), 3u);
  EXPECT_DOUBLE_EQ(r.rank_steps[1].compute_s, 0.2);
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_EQ(r.stragglers[0].machine, "10.0.0.7");
  EXPECT_DOUBLE_EQ(r.stragglers[0].ratio, 2.0);
  const std::string page = Page(r);
  EXPECT_TRUE(Contains(page, "id=\"rank_compute\""));
  EXPECT_TRUE(Contains(page, "<td>10.0.0.7</td>"));
  // Rank 0's mean is weighted by steps: (0.1 x 10 + 0.3 x 30) / 40 = 0.25 s.
  EXPECT_TRUE(Contains(page, "<td>2</td><td>0</td><td>0</td><td>250.0 ms</td>")) << page;
  EXPECT_FALSE(Contains(page, "not recorded"));
}

// Machines that differ: a 1 x 2 launched with shares 5,3, a machine found slower, re-planned
// to 6,2; each generation's shares by machine and what followed the finding are shown.
TEST_F(RunReportTest, UnevenSharesAndMachinesSlowerThanPlannedAreShown) {
  fs_.AddFile("run/events.jsonl",
              R"({"time":100.0,"event":"start","program":"p"}
{"time":100.5,"event":"launch","generation":0,"stages":1,"replicas":2,"world_size":2,"stage_to_rank_map":"0,1;","shares":[5,3],"machines":["10.0.0.6","10.0.0.7"],"resume_step":0}
{"time":103.0,"event":"slow_machine","machine":"10.0.0.7","ratio":2.5,"busy":1,"factor":2.5,"plan":"1 x 2, shares 6,2","action":"replan","generation":0}
{"time":103.5,"event":"launch","generation":1,"stages":1,"replicas":2,"world_size":2,"stage_to_rank_map":"0,1;","shares":[6,2],"machines":["10.0.0.6","10.0.0.7"],"resume_step":30}
)");
  fs_.AddFile("run/metrics.jsonl", RecordedStep(1, 0, 101.0, 3.0));
  const RunReport r = Read();
  ASSERT_EQ(r.generations.size(), 2u);
  EXPECT_EQ(r.generations[1].shares, (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(r.generations[1].share_machines, (std::vector<std::string>{"10.0.0.6", "10.0.0.7"}));
  ASSERT_EQ(r.slow_machines.size(), 1u);
  EXPECT_EQ(r.slow_machines[0].action, "replan");
  const std::string page = Page(r);
  EXPECT_TRUE(Contains(page, "<h2>Machines that differ</h2>")) << page;
  EXPECT_TRUE(Contains(page, "<canvas id=\"machine_shares\">")) << page;
  EXPECT_TRUE(Contains(page, R"("fractions":[0.75,0.25],"generation":1,"machines":["10.0.0.6","10.0.0.7"])"))
      << page;
  EXPECT_TRUE(Contains(page, "<td>0</td><td>1 x 2</td><td>10.0.0.6 5, 10.0.0.7 3</td>")) << page;
  EXPECT_TRUE(Contains(page, "<td>10.0.0.7</td><td>0</td><td>2.50</td><td>re-planned: 1 x 2, "
                             "shares 6,2</td>"))
      << page;
  // Like machines: no such section.
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  EXPECT_FALSE(Contains(Page(Read()), "Machines that differ"));
}

TEST_F(RunReportTest, WithoutRankStepsTheStepTracesStandIn) {
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  fs_.AddFile("run/metrics.jsonl", RecordedMetrics());
  // One traced step of rank 0 of generation 0: 30 ms of compute in a 50 ms step.
  fs_.AddFile("run/logs/gen-0/rank-0.trace.json",
              R"x({"traceEvents":[{"name":"thread_name","ph":"M","args":{"name":"rank 0 (stage 0, replica 0)",)x"
              R"("rank":0,"stage":0,"replica":0}},)"
              R"({"name":"Ra0","ph":"X","ts":1000,"dur":5000,"args":{"step_start_us":1000}},)"
              R"({"name":"F0","ph":"X","ts":6000,"dur":10000,"args":{"step_start_us":1000}},)"
              R"({"name":"B0","ph":"X","ts":16000,"dur":15000,"args":{"step_start_us":1000}},)"
              R"({"name":"reduce","ph":"X","ts":31000,"dur":15000,"args":{"step_start_us":1000}},)"
              R"({"name":"update","ph":"X","ts":46000,"dur":5000,"args":{"step_start_us":1000}}]})");
  fs_.AddFile("run/logs/gen-0/rank-1.trace.json", "{\"traceEv");  // cut short: skipped
  const RunReport r = Read();
  EXPECT_EQ(r.rank_source, RankSource::kTraces);
  ASSERT_EQ(r.rank_steps.size(), 1u);
  EXPECT_NEAR(r.rank_steps[0].compute_s, 0.030, 1e-9);
  EXPECT_NEAR(r.rank_steps[0].wait_s, 0.020, 1e-9);
  EXPECT_TRUE(Contains(Page(r), "Per-rank step times are not recorded for this run (no "
                                "rank_steps.jsonl); shown instead"));
}

TEST_F(RunReportTest, WithNeitherThePageSaysSo) {
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  const std::string page = Page(Read());
  EXPECT_TRUE(Contains(page, "Per-rank step times are not recorded for this run (no "
                             "rank_steps.jsonl and no step traces)"));
  EXPECT_FALSE(Contains(page, "id=\"ranks\""));
}

TEST_F(RunReportTest, ThePageIsSelfContainedAndItsDataCannotEndItsScript) {
  fs_.AddFile("run/events.jsonl",
              std::string(kRecordedEvents) +
                  R"({"time":109,"event":"failure","reason":"</script><b>x</b>","step":6,"generation":2})"
                  "\n");
  const std::string page = Page(Read());
  EXPECT_TRUE(Contains(page, "/*! chart.js stand-in */"));
  EXPECT_TRUE(Contains(page, "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"));  // in the table
  EXPECT_TRUE(Contains(page, "<\\/script><b>x<\\/b>"));                // in the data
  EXPECT_FALSE(Contains(page, "src=\"http"));
  EXPECT_FALSE(Contains(page, "href=\"http"));
}

TEST_F(RunReportTest, ALongRunsChartsGetEveryKthStepAndTheLast) {
  std::string metrics;
  // 26 steps: the stride (3) does not land on the last, which is added all the same.
  for (int step = 1; step <= 26; ++step) metrics += RecordedStep(step, 0, 100 + step, 1.0);
  fs_.AddFile("run/metrics.jsonl", metrics);
  PageOptions options;
  options.max_chart_points = 10;
  const std::string page = RenderReportPage(Read(), options);
  const std::string open = "<script id=\"report-data\" type=\"application/json\">";
  const size_t begin = page.find(open) + open.size();
  Result<JsonObject> data = JsonObject::Parse(page.substr(begin, page.find("</script>", begin) - begin));
  ASSERT_TRUE(data.ok()) << data.status().message();
  Result<JsonObject> steps = JsonObject::Parse(data->Find("steps")->string_value());
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->Find("step")->string_value(), "[1,4,7,10,13,16,19,22,25,26]");
  EXPECT_TRUE(Contains(page, "<th>steps</th><td>26</td>"));
}

TEST_F(RunReportTest, BadRunDirectoriesNameTheFix) {
  Result<RunReport> missing = ReadRunReport(fs_, "nowhere");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(missing.status().message(), "no such directory: nowhere; give the run "
                                                   "directory of a job"));
  Result<RunReport> empty = ReadRunReport(fs_, "run");
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Contains(empty.status().message(), "run is not a run directory (it has no "
                                                 "events.jsonl or metrics.jsonl)"));
  fs_.AddFile("file", "x");
  Result<RunReport> file = ReadRunReport(fs_, "file");
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status().message(), "file is not a directory"));
}

}  // namespace
}  // namespace mitra::report
