// `mitra report RUN_DIR`: the page written where it is asked for, and bad input named.
#include "cli/report_command.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/clock.h"
#include "tests/common/memory_file_system.h"
#include "tests/report/recorded_run.h"

namespace mitra::cli {
namespace {

using testing::kRecordedEvents;
using testing::RecordedMetrics;
using testing::RecordedStep;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ReportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs_.CreateDirectories("run").ok()); }

  int Report(const std::string& out_path = "") {
    ReportCommandOptions options;
    options.run_dir = "run";
    options.out = out_path;
    options.chart_js = "chart.min.js";
    out_.str("");
    err_.str("");
    return ReportCommand(options, fs_, clock_, out_, err_);
  }

  testing::MemoryFileSystem fs_;
  ManualClock clock_;
  std::ostringstream out_, err_;
};

TEST_F(ReportCommandTest, WritesThePageIntoTheRunDirectory) {
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  fs_.AddFile("run/metrics.jsonl", RecordedMetrics());
  fs_.AddFile("chart.min.js", "/*! Chart.js v3 */ var Chart;");
  ASSERT_EQ(Report(), 0) << err_.str();
  EXPECT_EQ(out_.str(), "mitra report: wrote run/report.html (6 steps, 3 generations, done); "
                        "open it in a browser\n");
  const std::string page = fs_.Contents("run/report.html");
  EXPECT_TRUE(Contains(page, "/*! Chart.js v3 */ var Chart;"));
  EXPECT_TRUE(Contains(page, "inlined from chart.min.js"));
  fs_.AddFile("run/events.jsonl", std::string(kRecordedEvents).substr(0, std::string(kRecordedEvents).find("{\"time\":103.0")));
  fs_.AddFile("run/metrics.jsonl", RecordedStep(1, 0, 101.5, 3.0));
  ASSERT_TRUE(fs_.CreateDirectories("out").ok());
  ASSERT_EQ(Report("out/r.html"), 0) << err_.str();
  EXPECT_EQ(out_.str(), "mitra report: wrote out/r.html (1 step, 1 generation, still running); "
                        "open it in a browser\n");
  EXPECT_TRUE(Contains(fs_.Contents("out/r.html"), "still running; report made"));
}

TEST_F(ReportCommandTest, BadInputExitsTwoAndNamesTheFix) {
  fs_.AddFile("run/events.jsonl", kRecordedEvents);
  EXPECT_EQ(Report(), 2);
  EXPECT_TRUE(Contains(err_.str(), "mitra report: cannot read Chart.js from chart.min.js"));
  EXPECT_TRUE(Contains(err_.str(), "apt-get install libjs-chart.js"));
  fs_.AddFile("chart.min.js", "var Chart;");
  EXPECT_EQ(Report("missing/r.html"), 2);
  EXPECT_EQ(err_.str(), "mitra report: cannot write missing/r.html: missing is not a directory; "
                        "create it, or give another file with -o FILE\n");
  fs_.set_fail_writes(true);
  EXPECT_EQ(Report(), 2);
  EXPECT_TRUE(Contains(err_.str(), "mitra report: cannot write run/report.html ("));
  EXPECT_TRUE(Contains(err_.str(), "give a file in a directory you can write with -o FILE"));
  EXPECT_TRUE(out_.str().empty());
}

}  // namespace
}  // namespace mitra::cli
