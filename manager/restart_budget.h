// The restart budget: after which unplanned failures the job is relaunched, and which end it
// (docs/manager.md, "Restart budget"). In the order they are asked:
//
//   1. A worker that exits with code 2 (kExitBadInput: its configuration is wrong) before the
//      job's first step ends the job at once: a relaunch would run the same configuration.
//   2. A failure that repeats the previous one ends the job: the program fails the same way at
//      every launch, and a relaunch would only train the same steps again to fail again.
//      Before its generation's first step: the same exit and the same error lines, numbers
//      aside (FailureExcerpt::Key), with no step trained in between. After it: the same exit
//      and error lines (it printed some: a Python traceback, a C++ exception) at the same step
//      of the job (a peer's loss or a preemption that strikes twice is not at the same step
//      with the same words). Not when the failed machine is kept out for it: the next launch
//      goes without it.
//   3. More than `max_restarts` failures within `window_s` end the job, instead of looping.
//   Any other failure is relaunched.
//
// Pure: the controller hands it each failure with the time; it never reads a clock. Not
// thread-safe: the controller owns it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/process_runner.h"
#include "manager/failure_excerpt.h"

namespace mitra::manager {

struct RestartBudgetOptions {
  int max_restarts = 5;  // --max-restarts; 0: the first failure ends the job
  double window_s = 600;  // failures older than this are forgotten
};

// A failure, as the budget weighs it.
struct FailureSeen {
  double time = 0;  // monotonic seconds
  // How the failed rank ended, when the failure is its exit; none for a rank that hung, could
  // not start or lost its machine's connection (the machine's failures, not the program's).
  std::optional<launcher::ExitStatus> exit;
  FailureExcerpt output;  // what it printed
  bool generation_trained = false;  // its generation had trained a step
  bool job_trained = false;         // some generation of this manager had
  int64_t step = 0;                 // the job's last step when it failed
  // The failed rank's machine is kept out for this failure (machine_pool.h: a remote machine
  // that failed again soon): the next launch goes without it, so a repeat on it says nothing
  // yet of the program. A repeat in that next launch, on another machine, does.
  bool machine_kept_out = false;
};

class RestartBudget {
 public:
  enum class Verdict {
    kRelaunch,          // within the budget
    kBadConfiguration,  // exit code 2 before the job's first step
    kRepeated,          // the same failure twice in a row (2. above)
    kSpent,             // more than max_restarts failures within the window
  };

  explicit RestartBudget(RestartBudgetOptions options) : options_(options) {}

  // Counts `failure` and says whether the job may go on.
  Verdict Judge(const FailureSeen& failure);
  // A generation trained its first step: a later failure before the first step repeats none
  // before it.
  void OnStepTrained() { last_early_.reset(); }

  // The failures within the window as of the last Judge.
  int failures() const { return static_cast<int>(times_.size()); }
  const RestartBudgetOptions& options() const { return options_; }

 private:
  RestartBudgetOptions options_;
  std::vector<double> times_;  // of the failures within the window, oldest first
  // The last failure's exit and Key(), when it came before its generation's first step.
  std::optional<std::string> last_early_;
  // The last failure's exit, Key() and step, when it came after a step and printed an error.
  std::optional<std::string> last_late_;
};

}  // namespace mitra::manager
