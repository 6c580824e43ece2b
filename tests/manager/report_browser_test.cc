// `mitra report` end to end: a real job under the real `mitra run` (fake_worker processes, one
// of them crashing, so the run has a failure and a recovery), the report of it while it runs
// and after it ended, and each page rendered by a real headless browser (Debian's chromium):
// its DOM must say that every chart drew without a script error, and its screenshot must be a
// page of the expected size with the charts' colours on it (png_stats.py reads the PNG).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "common/json.h"
#include "tests/manager/run_helpers.h"
#include "tests/prerequisite.h"

namespace mitra::testing {
namespace {

constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The full path of `name` on PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
    end = dirs.find(':', begin);
    const std::string file = dirs.substr(begin, end - begin) + "/" + name;
    if (::access(file.c_str(), X_OK) == 0) return file;
  }
  return "";
}

std::string Missing() {
  if (FindOnPath("chromium").empty()) return "chromium is not installed (apt-get install chromium)";
  if (FindOnPath("python3").empty()) return "python3 is not installed";
  if (!std::filesystem::exists(kChartJs)) {
    return "Chart.js is not installed (apt-get install libjs-chart.js)";
  }
  return "";
}

int CountOf(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = 0; (at = text.find(part, at)) != std::string::npos; at += part.size()) ++n;
  return n;
}

class ReportBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MITRA_SKIP_WITHOUT(Missing());
    dir_.Write("machines.txt", "localhost slots=2\n");
  }

  // mitra run on 2 slots in 1 x 2 for 24 steps; rank 1 of the first generation dies after
  // step 6, so the job recovers in a second generation.
  std::vector<std::string> RunArgs() const {
    return {"run", "--machines", "machines.txt", "--run-dir", "run", "--batch-size", "8",
            "--nstages", "1", "--max-steps", "24", "--max-restarts", "2", "--",
            FAKE_WORKER_BINARY, "--step-ms", "60", "--crash-rank", "1", "--crash-at-step", "6",
            "--fail-generation", "0"};
  }

  MitraResult Report(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"report", "run"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunProgram(MITRA_BINARY, args, dir_.path(), 30);
  }

  // chromium --headless with a profile of its own in the test's directory.
  MitraResult Chromium(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--headless", "--no-sandbox", "--disable-gpu",
                                    "--user-data-dir=" + dir_.Path("chromium-profile"),
                                    "--window-size=1200,2000", "--hide-scrollbars"};
    all.insert(all.end(), args.begin(), args.end());
    return RunProgram(FindOnPath("chromium"), all, dir_.path(), 90);
  }

  // The page rendered: every chart drew and no script failed.
  void ExpectRendered(const std::string& page_path) {
    const std::string page = ReadFileOrEmpty(page_path);
    ASSERT_FALSE(page.empty()) << page_path;
    const int canvases = CountOf(page, "<canvas");
    EXPECT_GE(canvases, 6) << "the summary's charts are missing";
    const MitraResult dom = Chromium({"--dump-dom", "file://" + page_path});
    ASSERT_EQ(dom.exit_code, 0) << dom.output();
    std::smatch body;
    ASSERT_TRUE(std::regex_search(dom.out, body, std::regex("<body[^>]*>"))) << dom.out;
    EXPECT_TRUE(Contains(body.str(), "data-charts=\"drawn\"")) << body.str() << "\n"
                                                               << dom.out.substr(0, 4000);
    EXPECT_TRUE(Contains(body.str(), "data-chart-count=\"" + std::to_string(canvases) + "\""))
        << body.str();
    EXPECT_TRUE(Contains(dom.out, "<pre id=\"errors\"></pre>")) << "script errors in the page";
  }

  // The screenshot: the window's size, not blank, with the colours of the charts' first two
  // series (#1f77b4 for generation 0, #ff7f0e for generation 1) on it.
  void ExpectScreenshot(const std::string& page_path) {
    const std::string png = dir_.Path("report.png");
    const MitraResult shot = Chromium({"--screenshot=" + png, "file://" + page_path});
    ASSERT_EQ(shot.exit_code, 0) << shot.output();
    const MitraResult stats =
        RunProgram(FindOnPath("python3"), {MITRA_PNG_STATS, png, "1f77b4", "ff7f0e"},
                   dir_.path(), 60);
    ASSERT_EQ(stats.exit_code, 0) << stats.output();
    Result<JsonObject> s = JsonObject::Parse(stats.out);
    ASSERT_TRUE(s.ok()) << stats.out;
    EXPECT_EQ(s->GetNumber("width"), 1200) << stats.out;
    EXPECT_EQ(s->GetNumber("height"), 2000) << stats.out;
    EXPECT_GE(s->GetNumber("colours").value_or(0), 100) << stats.out;
    const double non_white = s->GetNumber("non_white").value_or(0);
    EXPECT_GT(non_white, 0.02) << stats.out;
    EXPECT_LT(non_white, 0.6) << stats.out;
    Result<JsonObject> near = JsonObject::Parse(s->Find("near")->string_value());
    ASSERT_TRUE(near.ok()) << stats.out;
    EXPECT_GE(near->GetNumber("1f77b4").value_or(0), 200) << "generation 0's series: " << stats.out;
    EXPECT_GE(near->GetNumber("ff7f0e").value_or(0), 200) << "generation 1's series: " << stats.out;
  }

  TempDir dir_;
};

TEST_F(ReportBrowserTest, AReportOfARunningJobAndOfTheFinishedOneRenderInChromium) {
  std::unique_ptr<MitraProcess> run = MitraProcess::Start(MITRA_BINARY, RunArgs(), dir_.path());
  ASSERT_TRUE(run);
  // While it runs, after the recovery: its files are being appended to.
  ASSERT_TRUE(run->WaitForStdout("mitra: recovery done", 60)) << run->Stdout() << run->Stderr();
  const MitraResult running = Report();
  ASSERT_EQ(running.exit_code, 0) << running.output();
  EXPECT_TRUE(Contains(running.out, "mitra report: wrote run/report.html (")) << running.out;
  EXPECT_TRUE(Contains(running.out, "still running")) << running.out;
  ExpectRendered(dir_.Path("run/report.html"));

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
  ExpectRendered(dir_.Path("final.html"));
  ExpectScreenshot(dir_.Path("final.html"));
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
