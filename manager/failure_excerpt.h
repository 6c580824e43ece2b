// What a failed worker printed, as its failure report quotes it and the restart budget
// (restart_budget.h) compares failures: the error lines of its output that came before its last
// lines, then its last lines. The launcher keeps both (launcher/output_lines.h: LineTail), so
// LibTorch's `what():` line is quoted even when a long stack trace follows it.
#pragma once

#include <string>
#include <vector>

namespace mitra::manager {

struct FailureExcerpt {
  std::vector<std::string> earlier_errors;  // error lines from before `tail`, oldest first
  std::vector<std::string> tail;            // the last lines, heartbeat records left out

  bool empty() const { return earlier_errors.empty() && tail.empty(); }
  // The earlier error lines, then those of the tail (launcher::IsErrorLine).
  std::vector<std::string> ErrorLines() const;
  // The worker's own words in one line: a C++ exception's message (after `what():`), else its
  // last error line, else its last line; without a logger's leading `[time] [level]`. "" when
  // it printed nothing.
  std::string Message() const;
  // What two failures must share to be the same one: the error lines (else the last line) with
  // every number left out, since times, pids, ranks and ports differ from launch to launch.
  std::string Key() const;
  // What to do about an error whose fix is known (the workers' Python cannot import mitra or
  // torch); "" for any other.
  std::string Hint() const;
};

// The excerpt of a process event's lines (launcher::ProcessEvent's earlier_errors and
// last_lines); its heartbeat and `starting` records (docs/worker-contract.md) say nothing about
// a failure and are left out, however their fields are ordered or spaced.
FailureExcerpt ExcerptOf(std::vector<std::string> earlier_errors,
                         const std::vector<std::string>& last_lines);

// What a failed rank did and what it printed, one "mitra: " line each, then the lines:
//   mitra: rank 1 (pid 4242) exited with code 7 after step 3
//   mitra: last 2 lines of logs/gen-0/rank-1.log:
//     | loading
//     | fatal: out of memory
// With earlier error lines, "error lines and the last 2 lines of ...", and `  | ...` between
// them and the tail.
// With `same_as_before` (the error lines of the failure reported before this one, Key()), the
// lines are not quoted again: "mitra: the same error lines as the failure before (in LOG)".
// A known error's Hint() follows as "mitra: hint: ...".
std::string FormatFailureReport(const std::string& what, const std::string& log_name,
                                const FailureExcerpt& excerpt, bool same_as_before = false);

}  // namespace mitra::manager
