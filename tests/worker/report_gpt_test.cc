// `mitra report` of the real GPT example under the real `mitra run`: a 2 x 2 job that shrinks to
// 2 x 1 mid-run (a planned morph), checkpoints every 10 steps and each rank's traced step, so
// every part of the page has real data; the page is rendered by headless chromium
// (tests/report/report_browser.h).
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/report/report_browser.h"
#include "tests/prerequisite.h"
#include "tests/worker/elastic_job.h"

namespace mitra::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ReportGpt, ARunThatMorphedWithCheckpointsAndTracesDrawsEveryChart) {
  MITRA_SKIP_WITHOUT(MissingBrowser());
  TempDir tmp;
  const std::string machines = tmp.Write("machines.txt", "localhost slots=4\n");
  const std::string run_dir = tmp.Path("run");
  // Workers restarted at the morph, so that each generation traces its own step.
  auto mitra = MitraProcess::Start(
      MITRA_BINARY,
      RunArgs(ElasticJob{16, 40}, machines, run_dir, 2, {"--checkpoint-every", "10", "--no-regroup"}),
      tmp.path());
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  RewriteFile(tmp, "machines.txt", "localhost slots=2\n");
  const MitraResult run = mitra->Wait(180);
  ASSERT_EQ(run.exit_code, 0) << run.output();
  ASSERT_TRUE(Contains(run.out, "mitra: morph done: training again in 2 x 1")) << run.out;
  // Whether a heartbeat carried step times before this short job ended depends on how fast the
  // machine runs it; without them the page falls back on the step traces, which is what this
  // test checks (run_report_test and report_browser_test draw the per-rank records).
  std::filesystem::remove(tmp.Path("run/rank_steps.jsonl"));

  const MitraResult report = RunProgram(MITRA_BINARY, {"report", "run"}, tmp.path(), 60);
  ASSERT_EQ(report.exit_code, 0) << report.output();
  EXPECT_EQ(report.out, "mitra report: wrote run/report.html (40 steps, 2 generations, done); "
                        "open it in a browser\n");
  const std::string page_path = tmp.Path("run/report.html");
  const std::string page = ReadFileOrEmpty(page_path);
  EXPECT_TRUE(Contains(page, "<th>generations</th><td>2 (2 x 2, 2 x 1)</td>")) << page;
  EXPECT_TRUE(Contains(page, "<tr><td>morph</td><td>machine list changed: localhost 4 -&gt; 2"))
      << "the morph and its cause";
  EXPECT_TRUE(Contains(page, "<tr><td>40</td><td>1</td>")) << "the last checkpoint";
  EXPECT_TRUE(Contains(page, "shown instead: the one step each rank traced per generation"));
  EXPECT_TRUE(Contains(page, "<tr><td>1</td><td>1</td><td>1</td>")) << "generation 1's rank 1";
  // The six charts of every run, the checkpoints' times and the ranks' compute and wait.
  EXPECT_EQ(ExpectPageRendered(tmp, page_path), 8);
  // Generation 0's series, generation 1's, and the checkpoints' total times.
  ExpectScreenshot(tmp, page_path, tmp.Path("report.png"), {"1f77b4", "ff7f0e", "2ca02c"});
}

}  // namespace
}  // namespace mitra::testing
