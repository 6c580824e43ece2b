#include "cli/report_command.h"

#include <cstdint>
#include <string>

#include "cli/run_command.h"
#include "report/report_page.h"
#include "report/run_report.h"

namespace mitra::cli {
namespace {

// The directory `path` is in: "" for a bare file name (the working directory).
std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// "1 step", "40 steps".
std::string Counted(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace

int ReportCommand(const ReportCommandOptions& options, FileSystem& fs, const Clock& clock,
                  std::ostream& out, std::ostream& err) {
  Result<report::RunReport> report = report::ReadRunReport(fs, options.run_dir);
  if (!report.ok()) {
    err << "mitra report: " << report.status().message() << std::endl;
    return kExitBadInput;
  }
  Result<std::string> chart_js = fs.ReadFile(options.chart_js);
  if (!chart_js.ok()) {
    err << "mitra report: cannot read Chart.js from " << options.chart_js << " ("
        << chart_js.status().message()
        << "); install Debian's libjs-chart.js (apt-get install libjs-chart.js), or give a "
           "copy of chart.min.js with --chart-js FILE"
        << std::endl;
    return kExitBadInput;
  }
  const std::string target =
      options.out.empty() ? JoinPath(options.run_dir, "report.html") : options.out;
  const std::string parent = Parent(target);
  if (!parent.empty() && !fs.IsDirectory(parent)) {
    err << "mitra report: cannot write " << target << ": " << parent
        << " is not a directory; create it, or give another file with -o FILE" << std::endl;
    return kExitBadInput;
  }
  report::PageOptions page;
  page.chart_js = std::move(*chart_js);
  page.chart_js_from = options.chart_js;
  page.generated_at = clock.WallSeconds();
  if (Status s = fs.WriteFileAtomically(target, report::RenderReportPage(*report, page)); !s.ok()) {
    err << "mitra report: cannot write " << target << " (" << s.message()
        << "); give a file in a directory you can write with -o FILE" << std::endl;
    return kExitBadInput;
  }
  out << "mitra report: wrote " << target << " (" << Counted(report->LastStep(), "step") << ", "
      << Counted(static_cast<int64_t>(report->generations.size()), "generation") << ", "
      << (report->end.finished ? report->end.state : "still running")
      << "); open it in a browser" << std::endl;
  return kExitOk;
}

}  // namespace mitra::cli
