// FinishAction: the controller's last action, how the job ends (manager/controller.h lists the
// others). Its own header because GenerationEnding decides it too.
#pragma once

#include <string>

namespace mitra::manager {

struct FinishAction {
  // kBadConfiguration: a worker said its configuration is wrong (exit code 2) before the job's
  // first step (restart_budget.h); `mitra run` exits 2.
  enum class Outcome { kDone, kStopped, kFailed, kBadConfiguration };
  Outcome outcome = Outcome::kFailed;
  std::string reason;  // kFailed: why, for the last line
};

}  // namespace mitra::manager
