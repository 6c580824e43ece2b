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

namespace {

// Why the job ends after a failure the restart budget will not relaunch: the failure, the
// worker's own words, and what to do.
std::string EndingReason(RestartBudget::Verdict verdict, const std::string& what,
                         const FailureExcerpt& output, const RestartBudget& budget,
                         double window_s, bool repeat_after_step) {
  const std::string message = output.Message();
  const std::string said = message.empty() ? what : what + ": " + message;
  switch (verdict) {
    case RestartBudget::Verdict::kBadConfiguration:
      return said + " (exit code 2: the program's configuration is wrong, and a relaunch would "
                    "run it again; fix it and run mitra run again)";
    case RestartBudget::Verdict::kRepeated:
      return said + " (" + (repeat_after_step ? "at the same step" : "before the first step") +
             ", as in the launch before: the program fails the same way at every launch, so it "
             "is not relaunched again; "
             "fix the cause and run mitra run again: it continues from the newest checkpoint)";
    case RestartBudget::Verdict::kSpent:
      if (budget.options().max_restarts == 0) return what;
      return what + " (" + std::to_string(budget.failures()) + " failures within " +
             DurationText(window_s) + ", more than --max-restarts " +
             std::to_string(budget.options().max_restarts) +
             "; fix the cause and run mitra run again: it continues from the newest checkpoint)";
    case RestartBudget::Verdict::kRelaunch:
      break;
  }
  return what;
}

}  // namespace

void Controller::Fail(std::optional<int> rank, const std::string& what, bool blame_machine,
                      bool machine_lost, const RankExited* exited) {
  if (training_done_) {
    FailAfterTraining(rank, what);
    if (rank && gen_.ranks[*rank].running) Signal(*rank, SIGKILL);
    return;
  }
  const FailureFact fact = TellFailure(rank, what);
  std::optional<MachinePool::Blame> blame;
  if (blame_machine && fact.where) blame = pool_.BlameFailure(fact.where->machine, what, now_);
  if (ending_.Is(Ending::kStop)) {
    ending_.FailJob(what);
  } else {
    JudgeFailure(what, machine_lost, exited, blame && blame->kept_out);
  }
  // A job that ends needs its machines no more.
  if (blame && !ending_.Is(Ending::kJobEnd)) CheckBlamed(fact.where->machine, what, *blame);
  TearDownAfterFailure(rank, what, machine_lost, fact.during_regroup);
}

FailureFact Controller::TellFailure(std::optional<int> rank, const std::string& what) {
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
  return fact;
}

void Controller::CheckBlamed(const std::string& address, const std::string& what,
                             const MachinePool::Blame& blame) {
  if (blame.check_now) actions_.push_back(CheckHostAction{*blame.check_now});
  if (blame.kept_out) {
    Tell(HostKeptOutFact{address, what, std::nullopt, blame.failures, blame.backoff_s});
  }
}

void Controller::JudgeFailure(const std::string& what, bool machine_lost,
                              const RankExited* exited, bool machine_kept_out) {
  FailureSeen seen;
  seen.time = now_;
  if (exited != nullptr && !exited->exit.lost) {
    seen.exit = exited->exit;
    seen.output = exited->output;
  }
  seen.generation_trained = gen_.first_step_seen;
  seen.job_trained = trained_;
  seen.step = last_step_;
  seen.machine_kept_out = machine_kept_out;
  const RestartBudget::Verdict verdict = budget_.Judge(seen);
  if (verdict != RestartBudget::Verdict::kRelaunch) {
    const auto outcome = verdict == RestartBudget::Verdict::kBadConfiguration
                             ? FinishAction::Outcome::kBadConfiguration
                             : FinishAction::Outcome::kFailed;
    ending_.EndJob(FinishAction{
        outcome, EndingReason(verdict, what, seen.output, budget_, options_.restart_window_s,
                              seen.generation_trained)});
    return;
  }
  ending_.BeginRecovery(now_);
  phase_ = Phase::kRecovering;
  reason_ = what;
  // A machine whose connection was lost is most likely gone (a frozen or dead host): its
  // check would only time out. Otherwise the relaunch waits a little for the failed
  // machine's check, so that a crashed worker's healthy machine stays in the shape.
  if (!machine_lost) gen_.deadlines.health = now_ + options_.health_wait_s;
}

void Controller::TearDownAfterFailure(std::optional<int> rank, const std::string& what,
                                      bool machine_lost, bool during_regroup) {
  // The survivors' collectives are already failing; anything they were writing is a partial
  // checkpoint that is never loaded. SIGKILL is the quickest way to a clean slate, unless they
  // can park: then they get a moment to, and the next generation keeps them.
  gen_.deadlines.stop.reset();
  gen_.deadlines.kill.reset();
  const bool survivors_park =
      ending_.Is(Ending::kRecovery) && !machine_lost && !during_regroup && gen_.AllReady() &&
      std::all_of(gen_.ranks.begin(), gen_.ranks.end(),
                  [](const RankState& r) { return !r.running || r.can_park; });
  if (!survivors_park) {
    KillRunning(what);
    return;
  }
  if (rank && gen_.ranks[*rank].running) Signal(*rank, SIGKILL);  // hung, or never started
  // The survivors give up the step in flight now (SIGALRM) instead of at their next message to
  // the failed rank, which a long micro-batch may delay by seconds; each keeps the steps it
  // completed.
  for (size_t i = 0; i < gen_.ranks.size(); ++i) {
    if (gen_.ranks[i].running && !gen_.ranks[i].killed) Signal(static_cast<int>(i), SIGALRM);
  }
  // Then SIGKILL whoever has not parked.
  gen_.deadlines.kill = now_ + std::max(options_.park_grace_s, 1.5 * last_step_s_);
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
  ending_.FailJob(why);
}

}  // namespace mitra::manager
