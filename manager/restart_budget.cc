#include "manager/restart_budget.h"

#include <algorithm>

namespace mitra::manager {

RestartBudget::Verdict RestartBudget::OnFailure(double now) {
  times_.push_back(now);
  times_.erase(std::remove_if(times_.begin(), times_.end(),
                              [&](double t) { return t < now - options_.window_s; }),
               times_.end());
  return failures() > options_.max_restarts ? Verdict::kSpent : Verdict::kRelaunch;
}

}  // namespace mitra::manager
