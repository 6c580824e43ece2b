// How a generation ends: the controller's half that stops, terminates, kills and fails ranks,
// keeps the restart budget, and decides what comes after the last exit (a relaunch, or the
// job's end). The other half, controller.cc, reacts to inputs and launches. One class,
// controller.h.
#include <signal.h>

#include <algorithm>

#include "common/duration_text.h"
#include "manager/controller.h"

namespace mitra::manager {
void Controller::BeginMorph(const std::string& why) {
  if (training_done_) {
    // The job has trained its last step; the ranks only finish their own work.
    Tell(MorphFact{why, gen_.ShapeText(), last_step_, gen_.Running(), /*skipped=*/true});
    return;
  }
  // A grow warming up goes on as this morph; standby workers that park before the launch are
  // still kept.
  warm_up_.reset();
  gen_.deadlines.warm_up.reset();
  ending_ = Ending::kMorph;
  phase_ = Phase::kMorphing;
  reason_ = why;
  change_.kind = "morph";
  change_.detected = now_;
  Tell(MorphFact{why, gen_.ShapeText(), last_step_, gen_.Running()});
  AskRanksToStop(/*park=*/true);
}

std::string Controller::KillHint(const StopInput& in) {
  return in.escalates ? " (" + in.source + " again kills them)" : "";
}

void Controller::BeginStop(const StopInput& in) {
  const std::string& why = in.source;
  ending_ = Ending::kStop;
  phase_ = Phase::kStopping;
  reason_ = why;
  Tell(StoppingFact{gen_.AllReady() ? StoppingFact::How::kAskRanks : StoppingFact::How::kBeforeReady,
                    why, KillHint(in), last_step_, gen_.Running(), options_.stop_timeout_s});
  AskRanksToStop();
}

void Controller::AskRanksToStop(bool park) {
  if (!gen_.AllReady()) {
    // Before `ready` a worker may not have its SIGUSR1 handler yet, and it has trained
    // nothing in this generation: terminate it.
    Terminate("not all workers were ready");
    return;
  }
  gen_.deadlines.stop = now_ + options_.stop_timeout_s;
  gen_.stop_signalled = now_;
  // SIGUSR2's default action ends a process: only when every rank said it handles it.
  const bool all_park = std::all_of(gen_.ranks.begin(), gen_.ranks.end(), [](const RankState& r) {
    return !r.running || r.can_park;
  });
  SignalRunning(park && all_park ? SIGUSR2 : SIGUSR1);
}

void Controller::Terminate(const std::string& why) {
  gen_.deadlines.stop.reset();
  if (gen_.Running() == 0) return;
  Tell(TerminateFact{why, gen_.RunningPids(), options_.kill_grace_s});
  SignalRunning(SIGTERM);
  gen_.deadlines.kill = now_ + options_.kill_grace_s;
}

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
    restart_times_.push_back(now_);
    restart_times_.erase(std::remove_if(restart_times_.begin(), restart_times_.end(),
                                        [&](double t) {
                                          return t < now_ - options_.restart_window_s;
                                        }),
                         restart_times_.end());
    const int failures = static_cast<int>(restart_times_.size());
    if (failures > options_.max_restarts) {
      std::string why = what;
      if (options_.max_restarts > 0) {
        why += " (" + std::to_string(failures) + " failures within " +
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

void Controller::KillRunning(const std::string& why) {
  if (gen_.Running() == 0) return;
  Tell(KillFact{gen_.RunningPids(), why});
  SignalRunning(SIGKILL);
  gen_.deadlines.abandon = now_ + options_.abandon_s;
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

void Controller::MaybeEndGeneration() {
  if (!gen_.live || gen_.Running() > 0) return;
  if (ending_ == Ending::kRecover) {
    // Wait for the failed machines' health checks, up to gen_.deadlines.health.
    if (pool_.CheckInFlight() && gen_.deadlines.health) {
      NoteRanksExited();
      return;
    }
  }
  gen_.live = false;
  NoteRanksExited();
  gen_.deadlines = Deadlines{};
  if (final_failure_) {
    Finish(final_failure_->outcome, final_failure_->reason);
    return;
  }
  switch (ending_) {
    case Ending::kNone:
      Finish(FinishAction::Outcome::kDone, "");
      return;
    case Ending::kStop:
      Finish(FinishAction::Outcome::kStopped, "");
      return;
    case Ending::kFinish:
      Finish(FinishAction::Outcome::kFailed, reason_);
      return;
    case Ending::kMorph:
    case Ending::kRecover:
      TryLaunch();
      return;
  }
}

void Controller::NoteRanksExited() {
  if (gen_.exit_noted) return;
  gen_.exit_noted = true;
  change_.ranks_exited = now_;
}

void Controller::TellTrainingAgain(int64_t step) {
  TrainingAgainFact fact;
  fact.kind = change_.kind;
  fact.step = step;
  fact.shape = gen_.ShapeText();
  fact.kept = gen_.kept;
  fact.started = static_cast<int>(gen_.ranks.size()) - gen_.kept;
  fact.downtime_s = now_ - change_.detected;
  fact.stop_s = change_.ranks_exited - change_.detected;
  fact.relaunch_s = gen_.launched_at - change_.ranks_exited;
  const double ready_at = gen_.all_ready_at >= 0 ? gen_.all_ready_at : now_;
  fact.ready_s = ready_at - gen_.launched_at;
  fact.load_s = std::min(gen_.restore_s, now_ - ready_at);
  fact.first_step_s = now_ - ready_at - fact.load_s;
  Tell(fact);
  change_.kind.clear();
}

void Controller::Finish(FinishAction::Outcome outcome, const std::string& reason) {
  ReleaseParked();
  phase_ = Phase::kFinished;
  gen_.live = false;
  actions_.push_back(FinishAction{outcome, reason});
}

}  // namespace mitra::manager
