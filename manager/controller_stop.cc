// Stopping ranks: a user's stop (Ctrl-C, SIGTERM, `mitra stop`), and the signals every ending
// of a generation sends: SIGUSR1 or SIGUSR2 to stop after the same step, SIGTERM to ranks that
// are not ready or too slow, SIGKILL. One class, controller.h.
#include <signal.h>

#include <algorithm>
#include <string>

#include "manager/controller.h"

namespace mitra::manager {

void Controller::OnStop(const StopInput& in) {
  if (stop_requested_ && !in.escalates) {
    Tell(StopRequestedFact{in.source, "already stopping"});
    return;
  }
  const bool first = !stop_requested_;
  stop_requested_ = true;
  Tell(StopRequestedFact{in.source, PhaseName(phase_)});
  switch (phase_) {
    case Phase::kWaiting:
      Finish(FinishAction::Outcome::kStopped, "");
      return;
    case Phase::kRunning:
      BeginStop(in);
      return;
    case Phase::kMorphing:
    case Phase::kRecovering:
      if (first) {
        ending_.BeginStop();
        phase_ = Phase::kStopping;
        Tell(StoppingFact{StoppingFact::How::kAfterTheChange, in.source, KillHint(in), last_step_});
        return;
      }
      [[fallthrough]];
    case Phase::kStopping:
      if (!gen_.deadlines.kill && !gen_.deadlines.abandon) {
        StoppingFact fact;
        fact.how = StoppingFact::How::kSecondRequest;
        fact.source = in.source;
        Tell(fact);
        ending_.FailJob("the workers were killed on a second " + in.source +
                        " before they stopped");
        Terminate("second " + in.source);
      } else if (gen_.deadlines.kill) {
        gen_.deadlines.kill = now_;  // impatient: SIGKILL now
      }
      return;
    case Phase::kFinished:
      return;
  }
}

std::string Controller::KillHint(const StopInput& in) {
  return in.escalates ? " (" + in.source + " again kills them)" : "";
}

void Controller::BeginStop(const StopInput& in) {
  const std::string& why = in.source;
  ending_.BeginStop();
  phase_ = Phase::kStopping;
  reason_ = why;
  Tell(StoppingFact{gen_.AllReady() ? StoppingFact::How::kAskRanks : StoppingFact::How::kBeforeReady,
                    why, KillHint(in), last_step_, gen_.Running(), options_.stop_timeout_s});
  AskRanksToStop();
}

bool Controller::EveryRankCanPark() const {
  return std::all_of(gen_.ranks.begin(), gen_.ranks.end(),
                     [](const RankState& r) { return !r.running || r.can_park; });
}

void Controller::AskRanksToStop(StopKind kind) {
  if (!gen_.AllReady()) {
    // Before `ready` a worker may not have its SIGUSR1 handler yet, and it has trained
    // nothing in this generation: terminate it.
    Terminate("not all workers were ready");
    return;
  }
  gen_.deadlines.stop = now_ + options_.stop_timeout_s;
  gen_.stop_signalled = now_;
  // SIGUSR2's default action ends a process, and SIGURG's is to ignore the signal: only when
  // every rank said it parks.
  if (kind == StopKind::kExit || !EveryRankCanPark()) {
    SignalRunning(SIGUSR1);
    return;
  }
  SignalRunning(kind == StopKind::kHold ? SIGURG : SIGUSR2);
}

void Controller::Terminate(const std::string& why) {
  gen_.deadlines.stop.reset();
  if (gen_.Running() == 0) return;
  Tell(TerminateFact{why, gen_.RunningPids(), options_.kill_grace_s});
  SignalRunning(SIGTERM);
  gen_.deadlines.kill = now_ + options_.kill_grace_s;
}

void Controller::KillRunning(const std::string& why) {
  if (gen_.Running() == 0) return;
  Tell(KillFact{gen_.RunningPids(), why});
  SignalRunning(SIGKILL);
  gen_.deadlines.abandon = now_ + options_.abandon_s;
}

}  // namespace mitra::manager
