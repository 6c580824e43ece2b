// `mitra report` end to end: a real job under the real `mitra run` (fake_worker processes, one
// of them crashing, so the run has a failure and a recovery), the report of it while it runs
// and after it ended, and each page rendered by a real headless browser (Debian's chromium):
// its DOM must say that every chart drew without a script error, and its screenshot must be a
// page of the expected size with the charts' colours on it (png_stats.py reads the PNG).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/common/run_helpers.h"
#include "tests/prerequisite.h"
#include "tests/report/report_browser.h"

namespace mitra::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app) << text;
}

class ReportBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MITRA_SKIP_WITHOUT(MissingBrowser());
    dir_.Write("machines.txt", "localhost slots=2\n");
  }

  // mitra run on 2 slots in 1 x 2 for `steps` steps of fake_worker with `worker_args`.
  std::vector<std::string> RunArgs(int steps, const std::vector<std::string>& worker_args) const {
    std::vector<std::string> args = {"run", "--machines", "machines.txt", "--run-dir", "run",
                                     "--batch-size", "8", "--nstages", "1", "--max-steps",
                                     std::to_string(steps), "--max-restarts", "2", "--",
                                     FAKE_WORKER_BINARY};
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    return args;
  }

  MitraResult Report(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"report", "run"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunProgram(MITRA_BINARY, args, dir_.path(), 30);
  }

  TempDir dir_;
};

// Rank 1 of the first generation dies after step 6, so the job recovers in a second one.
TEST_F(ReportBrowserTest, AReportOfARunningJobAndOfTheFinishedOneRenderInChromium) {
  std::unique_ptr<MitraProcess> run = MitraProcess::Start(
      MITRA_BINARY,
      RunArgs(24, {"--step-ms", "60", "--crash-rank", "1", "--crash-at-step", "6",
                   "--fail-generation", "0"}),
      dir_.path());
  ASSERT_TRUE(run);
  // While it runs, after the recovery: its files are being appended to.
  ASSERT_TRUE(run->WaitForStdout("mitra: recovery done", 60)) << run->Stdout() << run->Stderr();
  const MitraResult running = Report();
  ASSERT_EQ(running.exit_code, 0) << running.output();
  EXPECT_TRUE(Contains(running.out, "mitra report: wrote run/report.html (")) << running.out;
  EXPECT_TRUE(Contains(running.out, "still running")) << running.out;
  EXPECT_EQ(ExpectPageRendered(dir_, dir_.Path("run/report.html")), 6);

  const MitraResult finished = run->Wait(60);
  ASSERT_EQ(finished.exit_code, 0) << finished.output();
  const MitraResult report = Report({"-o", "final.html"});
  ASSERT_EQ(report.exit_code, 0) << report.output();
  EXPECT_EQ(report.out,
            "mitra report: wrote final.html (24 steps, 2 generations, done); open it in a "
            "browser\n");
  const std::string page = ReadFileOrEmpty(dir_.Path("final.html"));
  EXPECT_TRUE(Contains(page, "<th>failures</th><td>1</td>"));
  EXPECT_TRUE(Contains(page, "<td>recovery</td><td>rank 1")) << "the recovery and its cause";
  EXPECT_TRUE(Contains(page, "Per-rank step times are not recorded for this run"));
  EXPECT_TRUE(Contains(page, " * Chart.js v")) << "Chart.js keeps its licence header";
  EXPECT_TRUE(Contains(page, " * Released under the MIT License"));
  // loss and throughput over steps and time, step times, the timeline.
  EXPECT_EQ(ExpectPageRendered(dir_, dir_.Path("final.html")), 6);
  // Generation 0's series are #1f77b4, generation 1's #ff7f0e.
  ExpectScreenshot(dir_, dir_.Path("final.html"), dir_.Path("final.png"), {"1f77b4", "ff7f0e"});
}

// rank_steps.jsonl, `straggler` and `slow_machine` events, as their contract
// (docs/mitra-run.md) says, added to a real run directory: the page draws each rank's compute
// and wait, lists the straggler, and draws each machine's part of the batch.
TEST_F(ReportBrowserTest, PerRankStepTimesStragglersAndSlowMachinesRenderWhenRecorded) {
  const MitraResult run = RunProgram(MITRA_BINARY, RunArgs(10, {}), dir_.path(), 60);
  ASSERT_EQ(run.exit_code, 0) << run.output();
  // At the times of the run's last steps.
  const double end = ReadJsonLines(dir_.Path("run/metrics.jsonl")).back().GetNumber("time").value();
  std::string lines;
  for (int step : {5, 10}) {
    for (int rank : {0, 1}) {
      lines += "{\"time\":" + std::to_string(end - 0.1 * (10 - step)) +
               ",\"generation\":0,\"rank\":" + std::to_string(rank) +
               ",\"stage\":0,\"step\":" + std::to_string(step) +
               ",\"steps\":5,\"compute_s\":" + (rank == 1 ? "0.05" : "0.02") +
               ",\"wait_s\":" + (rank == 1 ? "0.001" : "0.03") + "}\n";
    }
  }
  dir_.Write("run/rank_steps.jsonl", lines + "{\"time\":" + std::to_string(end) + ",\"gener");
  Append(dir_.Path("run/events.jsonl"),
         "{\"time\":" + std::to_string(end) + ",\"event\":\"straggler\",\"generation\":0,\"rank\":1,"
         "\"machine\":\"localhost\",\"stage\":0,\"compute_s\":0.05,\"peer_median_s\":0.02,"
         "\"ratio\":2.5,\"steps\":20}\n"
         "{\"time\":" + std::to_string(end) + ",\"event\":\"slow_machine\",\"machine\":"
         "\"localhost\",\"ratio\":2.5,\"busy\":2,\"factor\":2.5,\"plan\":\"1 x 2\","
         "\"action\":\"keep\",\"generation\":0}\n");
  const MitraResult report = Report();
  ASSERT_EQ(report.exit_code, 0) << report.output();
  const std::string page = ReadFileOrEmpty(dir_.Path("run/report.html"));
  EXPECT_FALSE(Contains(page, "not recorded"));
  EXPECT_TRUE(Contains(page, "<tr><td>rank 1</td><td>0</td><td>localhost</td><td>0</td>"
                             "<td>50.0 ms</td><td>20.0 ms</td><td>2.50</td><td>20</td></tr>"))
      << page.substr(page.find("Per-rank"), 3000);
  EXPECT_TRUE(Contains(page, "<h2>Machines that differ</h2>"));
  // The six charts of any run, the ranks' compute and wait, their compute over steps, and the
  // machines' parts of the batch.
  EXPECT_EQ(ExpectPageRendered(dir_, dir_.Path("run/report.html")), 9);
}

TEST_F(ReportBrowserTest, BadInputExitsTwoAndWritesNothing) {
  MitraResult r = Report();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "mitra report: no such directory: run; give the run directory of a job (the "
                   "--run-dir of `mitra run`, default mitra-run)\n");
  std::filesystem::create_directory(dir_.Path("run"));
  r = Report();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "run is not a run directory")) << r.err;
  dir_.Write("run/metrics.jsonl", "");
  r = Report({"-o", "no/such/dir/r.html"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "no/such/dir is not a directory; create it")) << r.err;
  r = Report({"--chart-js", "none.js"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "install Debian's libjs-chart.js")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("run/report.html")));
}

}  // namespace
}  // namespace mitra::testing
