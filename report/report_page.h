// The page of `mitra report`: one self-contained HTML file that shows a RunReport, for any
// browser and without a network. The summary and the tables are plain HTML; the charts are
// drawn by Chart.js, whose text the caller passes in and which is inlined into the page with
// its licence header.
//
// The page's script draws every chart inside its own try/catch. When it is done it sets
// `data-charts` on <body> to "drawn" (every chart drew) or "failed", `data-chart-count` to how
// many charts drew, and writes each error into <pre id="errors"> — so a headless browser's
// DOM says whether the page worked.
#pragma once

#include <string>

#include "report/run_report.h"

namespace mitra::report {

struct PageOptions {
  std::string chart_js;        // the text of Chart.js (a UMD build that defines `Chart`)
  std::string chart_js_from;   // where it was read, named in a comment of the page
  double generated_at = 0;     // Unix seconds, shown in the page
  // At most about this many steps go into each chart (every k-th, and the last), so that a long
  // run's page stays quick to draw; the summary counts them all.
  size_t max_chart_points = 5000;
};

std::string RenderReportPage(const RunReport& report, const PageOptions& options);

}  // namespace mitra::report
