// `mitra report RUN_DIR [-o FILE] [--chart-js FILE]`: writes one self-contained HTML page about
// a job (run_report.h reads it, report_page.h renders it), for a finished run or a running one.
#pragma once

#include <ostream>
#include <string>

#include "cli/run_options.h"
#include "common/clock.h"
#include "common/file_system.h"

namespace mitra::cli {

// Reads the run directory and the Chart.js file through `fs`, writes the page atomically, and
// says where on `out`. Returns 0, or 2 with a message on `err` that names the fix: no such
// directory, not a run directory, no Chart.js, an output that cannot be written.
int ReportCommand(const ReportCommandOptions& options, FileSystem& fs, const Clock& clock,
                  std::ostream& out, std::ostream& err);

}  // namespace mitra::cli
