// Renders a `mitra report` page in a real headless browser (Debian's chromium) and checks what
// came out, for the report's end-to-end tests (tests/report/report_browser_test.cc with
// fake_worker, tests/worker/report_gpt_test.cc with the GPT example):
//   - the DOM after the page's script ran: <body data-charts="drawn"> and as many drawn charts
//     (data-chart-count) as the page has canvases, and no script error in <pre id="errors">;
//   - a screenshot: the window's size, not blank, with the given chart colours on it
//     (png_stats.py, whose path is MITRA_PNG_STATS, counts them).
// Needs MITRA_PNG_STATS defined. Not thread-safe: one browser at a time per directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/common/run_helpers.h"

namespace mitra::testing {

inline constexpr const char* kChartJsFile = "/usr/share/javascript/chart.js/chart.min.js";
inline constexpr int kShotWidth = 1200, kShotHeight = 2000;

// The full path of `name` on PATH, or "".
inline std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
    end = dirs.find(':', begin);
    const std::string file = dirs.substr(begin, end - begin) + "/" + name;
    if (::access(file.c_str(), X_OK) == 0) return file;
  }
  return "";
}

// What this machine lacks to render a report, for MITRA_SKIP_WITHOUT; "" when nothing.
inline std::string MissingBrowser() {
  if (FindOnPath("chromium").empty()) return "chromium is not installed (apt-get install chromium)";
  if (FindOnPath("python3").empty()) return "python3 is not installed";
  if (!std::filesystem::exists(kChartJsFile)) {
    return "Chart.js is not installed (apt-get install libjs-chart.js)";
  }
  return "";
}

inline int CountOf(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = 0; (at = text.find(part, at)) != std::string::npos; at += part.size()) ++n;
  return n;
}

// chromium --headless ARGS, with a profile of its own under `dir`.
inline MitraResult Chromium(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> all = {
      "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + dir.Path("chromium"),
      "--window-size=" + std::to_string(kShotWidth) + "," + std::to_string(kShotHeight),
      "--hide-scrollbars"};
  all.insert(all.end(), args.begin(), args.end());
  return RunProgram(FindOnPath("chromium"), all, dir.path(), 90);
}

// Every chart of the page at `page_path` drew, without a script error. Returns its canvases.
inline int ExpectPageRendered(const TempDir& dir, const std::string& page_path) {
  const std::string page = ReadFileOrEmpty(page_path);
  EXPECT_FALSE(page.empty()) << page_path;
  const int canvases = CountOf(page, "<canvas");
  const MitraResult dom = Chromium(dir, {"--dump-dom", "file://" + page_path});
  EXPECT_EQ(dom.exit_code, 0) << dom.output();
  std::smatch body;
  if (!std::regex_search(dom.out, body, std::regex("<body[^>]*>"))) {
    ADD_FAILURE() << "no <body> in the DOM:\n" << dom.out.substr(0, 4000);
    return canvases;
  }
  EXPECT_TRUE(body.str().find("data-charts=\"drawn\"") != std::string::npos)
      << body.str() << "\n" << dom.out.substr(dom.out.find("<pre id=\"errors\">"), 2000);
  EXPECT_TRUE(body.str().find("data-chart-count=\"" + std::to_string(canvases) + "\"") !=
              std::string::npos)
      << body.str() << " for " << canvases << " canvases";
  EXPECT_TRUE(dom.out.find("<pre id=\"errors\"></pre>") != std::string::npos)
      << "script errors in the page";
  return canvases;
}

// A screenshot of the page at `page_path` (written to `png`) is the window's size, not blank,
// and shows each colour of `colours` (RRGGBB) on at least `min_pixels` pixels.
inline void ExpectScreenshot(const TempDir& dir, const std::string& page_path,
                             const std::string& png, const std::vector<std::string>& colours,
                             int min_pixels = 200) {
  const MitraResult shot = Chromium(dir, {"--screenshot=" + png, "file://" + page_path});
  ASSERT_EQ(shot.exit_code, 0) << shot.output();
  std::vector<std::string> args = {MITRA_PNG_STATS, png};
  args.insert(args.end(), colours.begin(), colours.end());
  const MitraResult stats = RunProgram(FindOnPath("python3"), args, dir.path(), 120);
  ASSERT_EQ(stats.exit_code, 0) << stats.output();
  Result<JsonObject> s = JsonObject::Parse(stats.out);
  ASSERT_TRUE(s.ok()) << stats.out;
  EXPECT_EQ(s->GetNumber("width"), kShotWidth) << stats.out;
  EXPECT_EQ(s->GetNumber("height"), kShotHeight) << stats.out;
  EXPECT_GE(s->GetNumber("colours").value_or(0), 100) << stats.out;
  const double non_white = s->GetNumber("non_white").value_or(0);
  EXPECT_GT(non_white, 0.02) << "a blank page: " << stats.out;
  EXPECT_LT(non_white, 0.6) << stats.out;
  Result<JsonObject> near = JsonObject::Parse(s->Find("near")->string_value());
  ASSERT_TRUE(near.ok()) << stats.out;
  for (const std::string& colour : colours) {
    EXPECT_GE(near->GetNumber(colour).value_or(0), min_pixels)
        << "too little #" << colour << ": " << stats.out;
  }
}

}  // namespace mitra::testing
