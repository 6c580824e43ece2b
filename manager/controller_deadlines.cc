// The controller's deadlines: ranks that fall silent (hung, stopped, cut off) or are not ready
// in time, stops and finishes that take too long, the grace after SIGTERM and SIGKILL, the
// warm-up of a grow and the wait for health checks after a failure. One class, controller.h.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "common/duration_text.h"
#include "common/strings.h"
#include "manager/controller.h"

namespace mitra::manager {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

bool Controller::SilenceWatched() const {
  return gen_.live && !ending_.Is(Ending::kRecovery) && !ending_.Is(Ending::kJobEnd);
}

void Controller::WatchSilence(const RankState& r) {
  if (const std::optional<double> silent_for = SilenceBound(r)) {
    gen_.silence_due = std::min(gen_.silence_due, r.last_heard + *silent_for);
  }
}

std::optional<double> Controller::SilenceBound(const RankState& r) const {
  // A rank that left training may work on without heartbeats (worker-contract.md), except one
  // that said it parks and stopped for a morph: it beats until it parks or exits.
  const bool may_be_silent = r.stopped && (r.finished || !r.can_park);
  if (!r.running || !r.started || may_be_silent) return std::nullopt;
  // Before its first heartbeat and `ready`, a rank is starting: only the start-up deadline
  // applies (a slow import is not a hang).
  if (!r.heartbeats && !r.ready) return std::nullopt;
  return options_.heartbeat_timeout_s;
}

double Controller::StartDeadline() const {
  return gen_.launched_at + std::max(options_.startup_timeout_s, 3 * slowest_start_s_);
}

void Controller::FailSlowStart() {
  const double waited = StartDeadline() - gen_.launched_at;
  for (size_t i = 0; i < gen_.ranks.size(); ++i) {
    const RankState& r = gen_.ranks[i];
    if (!r.running || r.ready) continue;
    const std::string said =
        r.starting ? "" : ", and said nothing: its program never reached mitra";
    Fail(static_cast<int>(i),
         gen_.Where(static_cast<int>(i)) + " was not ready " + DurationText(waited) +
             " after its launch" + said + " (--start-timeout " +
             DurationText(options_.startup_timeout_s) +
             (waited > options_.startup_timeout_s ? ", tripled to the slowest start of this job"
                                                  : "") +
             ": give a slow program longer)",
         true);
    return;
  }
}

void Controller::NoteStarting() {
  gen_.deadlines.starting_note = now_ + options_.starting_note_every_s;
  StartingFact fact;
  fact.total = static_cast<int>(gen_.ranks.size());
  for (const RankState& r : gen_.ranks) {
    if (!r.running || r.ready) continue;
    ++fact.starting;
    if (!r.starting) ++fact.silent;
  }
  fact.for_s = now_ - gen_.launched_at;
  fact.timeout_s = StartDeadline() - gen_.launched_at;
  if (fact.starting == 0) return;
  Tell(fact);
  if (phase_ == Phase::kRunning) {
    reason_ = StartingText(fact);
    gen_.starting_said = true;
  }
}

void Controller::OnTimers() {
  if (gen_.live && ending_.Is(Ending::kNone) && !gen_.AllReady()) {
    if (now_ >= StartDeadline()) {
      FailSlowStart();
    } else if (gen_.deadlines.starting_note && now_ >= *gen_.deadlines.starting_note) {
      NoteStarting();
    }
  }
  if (SilenceWatched() && now_ >= gen_.silence_due) {
    // Some rank may be silent: look at all of them, and note when the next one may be.
    gen_.silence_due = kInfinity;
    std::optional<int> silent;
    for (size_t i = 0; i < gen_.ranks.size(); ++i) {
      const RankState& r = gen_.ranks[i];
      const std::optional<double> bound = SilenceBound(r);
      if (!bound) continue;
      gen_.silence_due = std::min(gen_.silence_due, r.last_heard + *bound);
      if (!silent && now_ - r.last_heard >= *bound) silent = static_cast<int>(i);
    }
    if (silent) {
      const RankState& r = gen_.ranks[*silent];
      Fail(*silent,
           gen_.Where(*silent) + " sent no heartbeat for " + DurationText(now_ - r.last_heard) +
               " (hung, stopped, or cut off; --heartbeat-timeout " +
               DurationText(options_.heartbeat_timeout_s) + ")",
           true);
    }
  }
  if (gen_.deadlines.stop && now_ >= *gen_.deadlines.stop) {
    gen_.deadlines.stop.reset();
    const std::string why = "the workers did not stop within " +
                            DurationText(options_.stop_timeout_s) + " of SIGUSR1 (--stop-timeout)";
    if (ending_.Is(Ending::kStop)) {
      Tell(TimeoutFact{TimeoutFact::Kind::kStop, why});
      ending_.FailJob(why);
      Terminate(why);
    } else {
      Fail(std::nullopt, why, /*blame_machine=*/false);
    }
  }
  if (gen_.deadlines.finish && now_ >= *gen_.deadlines.finish) {
    gen_.deadlines.finish.reset();
    // Ranks that reported `stopped` have left training and may take their time.
    std::vector<std::string> running;
    for (size_t i = 0; i < gen_.ranks.size(); ++i) {
      if (gen_.ranks[i].running && !gen_.ranks[i].stopped) running.push_back(std::to_string(i));
    }
    if (!running.empty()) {
      const std::string why = "rank(s) " + Join(running, ", ") + " still running " +
                              DurationText(options_.finish_timeout_s) +
                              " after other ranks exited normally";
      Tell(TimeoutFact{TimeoutFact::Kind::kFinish, why});
      ending_.EndJob(FinishAction{FinishAction::Outcome::kFailed, why});
      Terminate(why);
    }
  }
  if (gen_.deadlines.kill && now_ >= *gen_.deadlines.kill) {
    gen_.deadlines.kill.reset();
    KillRunning("");
  }
  if (gen_.deadlines.abandon && now_ >= *gen_.deadlines.abandon) {
    gen_.deadlines.abandon.reset();
    std::vector<std::string> left;
    for (size_t i = 0; i < gen_.ranks.size(); ++i) {
      if (!gen_.ranks[i].running) continue;
      left.push_back(gen_.Where(static_cast<int>(i)));
      gen_.ranks[i].running = false;
    }
    if (!left.empty()) Tell(AbandonFact{left, options_.abandon_s});
    MaybeEndGeneration();
  }
  if (gen_.deadlines.warm_up && now_ >= *gen_.deadlines.warm_up) {
    gen_.deadlines.warm_up.reset();
    EndWarmUp();
  }
  if (gen_.deadlines.health && now_ >= *gen_.deadlines.health) {
    gen_.deadlines.health.reset();
    MaybeEndGeneration();
  }
  for (const Machine& m : pool_.DueChecks(now_)) actions_.push_back(CheckHostAction{m});
}

}  // namespace mitra::manager
