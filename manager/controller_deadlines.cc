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
  return gen_.live && ending_ != Ending::kRecover && ending_ != Ending::kFinish;
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
  return r.heartbeats ? options_.heartbeat_timeout_s : options_.first_heartbeat_timeout_s;
}

void Controller::OnTimers() {
  if (gen_.live && ending_ == Ending::kNone) {
    if (!gen_.AllReady() && now_ >= gen_.launched_at + options_.startup_timeout_s) {
      for (size_t i = 0; i < gen_.ranks.size(); ++i) {
        if (gen_.ranks[i].running && !gen_.ranks[i].ready) {
          Fail(static_cast<int>(i),
               gen_.Where(static_cast<int>(i)) + " was not ready " +
                   DurationText(options_.startup_timeout_s) + " after its launch",
               true);
          break;
        }
      }
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
           gen_.Where(*silent) + " sent no heartbeat " +
               (r.heartbeats ? "for " + DurationText(now_ - r.last_heard)
                             : "in the " + DurationText(now_ - r.last_heard) + " after it started") +
               " (hung, stopped, or cut off)",
           true);
    }
  }
  if (gen_.deadlines.stop && now_ >= *gen_.deadlines.stop) {
    gen_.deadlines.stop.reset();
    const std::string why = "the workers did not stop within " +
                            DurationText(options_.stop_timeout_s) + " of SIGUSR1 (--stop-timeout)";
    if (ending_ == Ending::kStop) {
      Tell(TimeoutFact{TimeoutFact::Kind::kStop, why});
      if (!final_failure_) final_failure_ = FinishAction{FinishAction::Outcome::kFailed, why};
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
      final_failure_ = FinishAction{FinishAction::Outcome::kFailed, why};
      ending_ = Ending::kFinish;
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
