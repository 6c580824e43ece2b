// The restart budget: after which unplanned failures the job is relaunched, and which end it
// (docs/manager.md, "Restart budget"). More than `max_restarts` failures within `window_s`
// end the job with the last one's reason, instead of looping.
//
// Pure: the controller hands it each failure with the time; it never reads a clock. Not
// thread-safe: the controller owns it.
#pragma once

#include <vector>

namespace mitra::manager {

struct RestartBudgetOptions {
  int max_restarts = 5;  // --max-restarts; 0: the first failure ends the job
  double window_s = 600;  // failures older than this are forgotten
};

class RestartBudget {
 public:
  enum class Verdict {
    kRelaunch,  // within the budget
    kSpent,     // more than max_restarts failures within the window
  };

  explicit RestartBudget(RestartBudgetOptions options) : options_(options) {}

  // Counts a failure at `now` (monotonic seconds) and says whether the job may go on.
  Verdict OnFailure(double now);

  // The failures within the window as of the last OnFailure.
  int failures() const { return static_cast<int>(times_.size()); }
  const RestartBudgetOptions& options() const { return options_; }

 private:
  RestartBudgetOptions options_;
  std::vector<double> times_;  // of the failures within the window, oldest first
};

}  // namespace mitra::manager
