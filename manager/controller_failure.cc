// Unplanned failures, the controller's half: a rank that failed is reported, its machine
// blamed, the restart budget asked (restart_budget.h), and the generation torn down for a
// recovery, or for the job's end (docs/manager.md, "Unplanned change: recovery"). One class,
// controller.h.
#include <signal.h>

#include <algorithm>
#include <string>

#include "common/duration_text.h"
#include "manager/controller.h"

namespace mitra::manager {

void Controller::Fail(std::optional<int> rank, const std::string& what, bool blame_machine,
                      bool machine_lost) {
  if (training_done_) {
    FailAfterTraining(rank, what);
    if (rank && gen_.ranks[*rank].running) Signal(*rank, SIGKILL);
    return;
  }
  FailureFact fact;
  fact.reason = what;
  fact.step = last_step_;
  // Regrouping in place went wrong: the kept workers are killed with the rest below, so the
  // next generation starts every rank afresh (none is parked: a launch lets go of the parked
  // workers it does not keep).
  fact.during_regroup = gen_.kept > 0 && !gen_.first_step_seen;
  if (rank) {
    fact.where = FailureFact::Where{*rank, gen_.ranks[*rank].pid,
                                    gen_.MachineOf(*rank).Address()};
  }
  Tell(fact);
  if (blame_machine && fact.where) {
    const std::string& address = fact.where->machine;
    const MachinePool::Blame blame = pool_.BlameFailure(address, what, now_);
    if (blame.check_now) actions_.push_back(CheckHostAction{*blame.check_now});
    if (blame.kept_out) {
      Tell(HostKeptOutFact{address, what, std::nullopt, blame.failures, blame.backoff_s});
    }
  }

  if (ending_ == Ending::kStop) {
    if (!final_failure_) final_failure_ = FinishAction{FinishAction::Outcome::kFailed, what};
  } else {
    if (budget_.OnFailure(now_) == RestartBudget::Verdict::kSpent) {
      std::string why = what;
      if (options_.max_restarts > 0) {
        why += " (" + std::to_string(budget_.failures()) + " failures within " +
               DurationText(options_.restart_window_s) + ", more than --max-restarts " +
               std::to_string(options_.max_restarts) +
               "; fix the cause and run mitra run again: it continues from the newest "
               "checkpoint)";
      }
      final_failure_ = FinishAction{FinishAction::Outcome::kFailed, why};
      ending_ = Ending::kFinish;
    } else {
      ending_ = Ending::kRecover;
      phase_ = Phase::kRecovering;
      reason_ = what;
      change_.kind = "recovery";
      change_.detected = now_;
      // A machine whose connection was lost is most likely gone (a frozen or dead host): its
      // check would only time out. Otherwise the relaunch waits a little for the failed
      // machine's check, so that a crashed worker's healthy machine stays in the shape.
      if (!machine_lost) gen_.deadlines.health = now_ + options_.health_wait_s;
    }
  }
  // The survivors' collectives are already failing; anything they were writing is a partial
  // checkpoint that is never loaded. SIGKILL is the quickest way to a clean slate, unless they
  // can park: then they get a moment to, and the next generation keeps them.
  gen_.deadlines.stop.reset();
  gen_.deadlines.kill.reset();
  const bool survivors_park =
      ending_ == Ending::kRecover && !machine_lost && !fact.during_regroup && gen_.AllReady() &&
      std::all_of(gen_.ranks.begin(), gen_.ranks.end(),
                  [](const RankState& r) { return !r.running || r.can_park; });
  if (!survivors_park) {
    KillRunning(what);
    return;
  }
  if (rank && gen_.ranks[*rank].running) Signal(*rank, SIGKILL);  // hung, or never started
  gen_.deadlines.kill = now_ + options_.park_grace_s;  // then SIGKILL whoever has not parked
}

void Controller::FailAfterTraining(std::optional<int> rank, const std::string& what) {
  const std::string why = what + " after training finished at step " + std::to_string(last_step_) +
                          " (checkpointed); nothing is relaunched";
  FailureFact fact;
  fact.reason = why;
  fact.step = last_step_;
  if (rank) fact.where = FailureFact::Where{*rank, gen_.ranks[*rank].pid, ""};
  fact.after_training = true;
  Tell(fact);
  if (!final_failure_) final_failure_ = FinishAction{FinishAction::Outcome::kFailed, why};
}

}  // namespace mitra::manager
