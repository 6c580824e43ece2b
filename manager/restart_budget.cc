#include "manager/restart_budget.h"

#include <algorithm>

#include "contract/exit_codes.h"

namespace mitra::manager {
namespace {

bool BadConfiguration(const FailureSeen& f) {
  return !f.job_trained && f.exit && f.exit->signal == 0 && f.exit->exit_code == kExitBadInput;
}

// What an early failure must share with the one before it to repeat it: the same exit and the
// same error lines. Nullopt for a failure that is no exit, or came after a step.
std::optional<std::string> EarlyFailureKey(const FailureSeen& f) {
  if (f.generation_trained || !f.exit) return std::nullopt;
  return f.exit->ToString() + "\n" + f.output.Key();
}

// The same for a failure after its generation's first step: the exit, the error lines and the
// step. Nullopt for a failure before it, one that is no exit, or one that printed no error.
std::optional<std::string> LateFailureKey(const FailureSeen& f) {
  if (!f.generation_trained || !f.exit || f.output.ErrorLines().empty()) return std::nullopt;
  return f.exit->ToString() + " after step " + std::to_string(f.step) + "\n" + f.output.Key();
}

}  // namespace

RestartBudget::Verdict RestartBudget::Judge(const FailureSeen& failure) {
  times_.push_back(failure.time);
  times_.erase(std::remove_if(times_.begin(), times_.end(),
                              [&](double t) { return t < failure.time - options_.window_s; }),
               times_.end());
  if (BadConfiguration(failure)) return Verdict::kBadConfiguration;
  std::optional<std::string> early = EarlyFailureKey(failure);
  std::optional<std::string> late = LateFailureKey(failure);
  const bool repeated = ((early && early == last_early_) || (late && late == last_late_)) &&
                        !failure.machine_kept_out;
  last_early_ = std::move(early);
  last_late_ = std::move(late);
  if (repeated) return Verdict::kRepeated;
  return failures() > options_.max_restarts ? Verdict::kSpent : Verdict::kRelaunch;
}

}  // namespace mitra::manager
