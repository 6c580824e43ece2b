#include "manager/controller.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/duration_text.h"
#include "common/overloaded.h"
#include "common/strings.h"
#include "manager/narration.h"

namespace mitra::manager {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

std::string PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kWaiting:
      return "waiting";
    case Phase::kRunning:
      return "running";
    case Phase::kMorphing:
      return "morphing";
    case Phase::kRecovering:
      return "recovering";
    case Phase::kStopping:
      return "stopping";
    case Phase::kFinished:
      return "finished";
  }
  return "unknown";
}

Controller::Controller(ControllerOptions options)
    : options_(std::move(options)),
      policy_(options_.policy ? options_.policy
                              : std::make_shared<FixedStagesPolicy>(options_.stages)),
      pool_(MachinePoolOptions{options_.backoff_base_s, options_.backoff_max_s,
                               options_.restart_window_s}),
      last_step_(options_.start_step) {
  gen_.number = options_.first_generation - 1;
}

std::vector<ControllerAction> Controller::Handle(const ControllerInput& input, double now) {
  now_ = now;
  actions_.clear();
  if (phase_ == Phase::kFinished) return {};
  std::visit(Overloaded{
                 [this](const StartInput& in) { OnStart(in); },
                 [this](const MachinesChanged& in) { OnMachinesChanged(in); },
                 [this](const RankStarted& in) { OnRankStarted(in); },
                 [this](const RankStartFailed& in) { OnRankStartFailed(in); },
                 [this](const RankReport& in) { OnReport(in); },
                 [this](const RankExited& in) { OnExited(in); },
                 [this](const HostChecked& in) { OnHostChecked(in); },
                 [this](const StopInput& in) { OnStop(in); },
                 [this](const DrainMachine& in) { OnDrain(in); },
                 [](const TimerInput&) {},
             },
             input);
  if (phase_ != Phase::kFinished) OnTimers();
  return std::move(actions_);
}

double Controller::NextDeadline() const {
  if (phase_ == Phase::kFinished) return kInfinity;
  double next = gen_.deadlines.Earliest();
  if (gen_.live) {
    if (!gen_.AllReady() && ending_ == Ending::kNone) {
      next = std::min(next, gen_.launched_at + options_.startup_timeout_s);
    }
  }
  if (SilenceWatched()) next = std::min(next, gen_.silence_due);
  next = std::min(next, pool_.NextCheckDue());
  return next;
}

// ---- Inputs ------------------------------------------------------------------------------

void Controller::OnStart(const StartInput& in) {
  pool_.Reset(in.list);
  for (const std::string& address : in.unreachable) {
    pool_.OnChecked(address, false, "unreachable at start", now_);
  }
  TryLaunch();
}

void Controller::OnMachinesChanged(const MachinesChanged& in) {
  const MachinePool::Change change = pool_.Update(in.list);
  ListChangedFact fact;
  for (const Machine& m : change.to_check) {
    actions_.push_back(CheckHostAction{m});
    fact.checking.push_back(m.Address());
  }
  fact.change = change.Describe();
  fact.added = change.added;
  fact.removed = change.removed;
  fact.slots = in.list.TotalSlots();
  fact.phase = PhaseName(phase_);
  using Action = ListChangedFact::Action;

  switch (phase_) {
    case Phase::kWaiting:
      fact.action = Action::kPlan;
      Tell(fact);
      TryLaunch();
      return;
    case Phase::kRunning: {
      std::string why;
      const auto desired = DesiredPlan(&why);
      if (desired && !DiffersFromCurrent(desired->first, desired->second)) {
        fact.action = Action::kKeep;
        fact.shape = gen_.ShapeText();
        Tell(fact);
        return;
      }
      // A machine the generation runs on left or lost slots: the job moves off it now.
      // Otherwise the machines only grew, and new workers may start before the morph.
      const bool shrunk = std::any_of(gen_.machines.begin(), gen_.machines.end(),
                                      [&](const Machine& m) { return pool_.Shrunk(m); });
      if (desired && !shrunk) {
        fact.action = Action::kMorph;
        Tell(fact);
        Morph("machine list changed: " + fact.change, desired->first, desired->second);
        return;
      }
      if (!desired) {
        // Fewer usable slots than stages. The running generation goes on unless it runs on a
        // machine that left the list or lost slots.
        bool affected = false;
        for (const Machine& m : gen_.machines) affected |= pool_.Shrunk(m);
        if (!affected) {
          fact.why = why;
          Tell(fact);
          return;
        }
      }
      fact.action = Action::kMorph;
      Tell(fact);
      BeginMorph("machine list changed: " + fact.change);
      return;
    }
    case Phase::kMorphing:
    case Phase::kRecovering:
      fact.action = Action::kFolded;
      Tell(fact);
      return;
    case Phase::kStopping:
    case Phase::kFinished:
      Tell(fact);
      return;
  }
}

void Controller::OnDrain(const DrainMachine& in) {
  DrainFact fact{in.address, in.by};
  if (pool_.Drained(in.address)) return;  // drained already: said when it was
  if (!pool_.Drain(in.address, in.by)) {
    fact.action = DrainFact::Action::kUnknown;
    Tell(fact);
    return;
  }
  const bool in_use =
      gen_.live && std::any_of(gen_.machines.begin(), gen_.machines.end(),
                               [&](const Machine& m) { return m.Address() == in.address; });
  switch (phase_) {
    case Phase::kRunning:
      if (!in_use) break;
      fact.action = DrainFact::Action::kMorph;
      Tell(fact);
      BeginMorph("draining " + in.address + " (" + in.by + ")");
      return;
    case Phase::kMorphing:
    case Phase::kRecovering:
      if (in_use) fact.action = DrainFact::Action::kFolded;
      break;
    case Phase::kWaiting:
    case Phase::kStopping:
    case Phase::kFinished:
      break;
  }
  Tell(fact);
}

void Controller::OnRankStarted(const RankStarted& in) {
  RankState* rank = CurrentRank(in.generation, in.rank);
  if (rank == nullptr) return;
  RankState& r = *rank;
  r.pid = in.pid;
  r.started = true;
  r.last_heard = now_;
  WatchSilence(r);
}

void Controller::OnRankStartFailed(const RankStartFailed& in) {
  if (in.generation == kStandbyGeneration) {
    OnStandbyGone(in.rank, in.reason);
    return;
  }
  RankState* rank = CurrentRank(in.generation, in.rank);
  if (rank == nullptr || !rank->running) return;
  RankState& r = *rank;
  r.running = false;
  const std::string what = "rank " + std::to_string(in.rank) + " could not be started on " +
                           gen_.machines[r.machine].Address() + ": " + in.reason;
  if (TearingDown()) {
    Tell(StartFailedFact{in.rank, what});
  } else {
    Fail(in.rank, what, /*blame_machine=*/true);
  }
  MaybeEndGeneration();
}

void Controller::OnReport(const RankReport& in) {
  if (in.generation == kStandbyGeneration) {
    OnStandbyReport(in);
    return;
  }
  RankState* rank = CurrentRank(in.generation, in.rank);
  if (rank == nullptr) return;
  RankState& r = *rank;
  r.last_heard = now_;
  switch (in.kind) {
    case RankReport::Kind::kReady:
      r.can_park = in.can_park;
      if (!gen_.MarkReady(in.rank)) return;
      if (gen_.AllReady()) {
        gen_.all_ready_at = now_;
        Tell(AllReadyFact{static_cast<int>(gen_.ranks.size()), now_ - gen_.launched_at});
      }
      return;
    case RankReport::Kind::kHeartbeat:
      if (!r.heartbeats) {
        r.heartbeats = true;
        WatchSilence(r);  // its bound just shrank to the heartbeat timeout
      }
      return;
    case RankReport::Kind::kCheckpoint:
      return;
    case RankReport::Kind::kRestored:
      if (in.rank == 0) gen_.restore_s = in.seconds;
      return;
    case RankReport::Kind::kParked:
      OnParked(in.rank);
      return;
    case RankReport::Kind::kStep:
      last_step_ = std::max(last_step_, in.step);
      if (!gen_.first_step_seen) {
        gen_.first_step_seen = true;
        if (!change_.kind.empty()) TellTrainingAgain(in.step);
      }
      return;
    case RankReport::Kind::kStopped:
      if (r.stopped) return;
      r.stopped = true;
      r.finished = in.finished;
      if (!training_done_ &&
          gen_.AllFinished()) {
        training_done_ = true;
        Tell(TrainingDoneFact{in.step});
      }
      if (gen_.stopped_step < 0) {
        gen_.stopped_step = in.step;
      } else if (gen_.stopped_step != in.step) {
        gen_.stopped_steps_agree = false;
      }
      Tell(RankStoppedFact{in.rank, in.step, now_ - gen_.stop_signalled});
      return;
  }
}

void Controller::OnExited(const RankExited& in) {
  if (in.generation == kStandbyGeneration && !parked_.Remove(in.generation, in.rank)) {
    OnStandbyGone(in.rank, "it " + in.exit.ToString() + " before it was ready");
    return;
  }
  if (parked_.Remove(in.generation, in.rank)) return;  // a parked worker ended: not kept now
  RankState* rank = CurrentRank(in.generation, in.rank);
  if (rank == nullptr || !rank->running) return;
  RankState& r = *rank;
  r.running = false;
  if (in.exit.ok()) {
    if (ending_ == Ending::kNone && gen_.Running() > 0 && !gen_.deadlines.finish) {
      gen_.deadlines.finish = now_ + options_.finish_timeout_s;
    }
    MaybeEndGeneration();
    return;
  }
  // Once the generation is being torn down, exits are our own signals or peers that lost the
  // failed rank: the first failure is the one reported.
  if (!TearingDown()) {
    std::string what = gen_.Where(in.rank) + " " + in.exit.ToString();
    if (last_step_ > 0) what += " after step " + std::to_string(last_step_);
    if (in.exit.signal == SIGUSR1) {
      what += " (it had no SIGUSR1 handler: a worker must install one before it reports ready)";
    }
    Fail(in.rank, what, /*blame_machine=*/true, /*machine_lost=*/in.exit.lost);
  }
  MaybeEndGeneration();
}

void Controller::OnHostChecked(const HostChecked& in) {
  const MachinePool::CheckResult result =
      pool_.OnChecked(in.address, in.healthy, in.reason, now_);
  if (!result.known) return;
  if (in.healthy) {
    if (result.joined) {
      const Machine* m = pool_.Find(in.address);
      Tell(HostHealthyFact{in.address, m != nullptr && m->IsLocal()});
    }
  } else {
    Tell(HostKeptOutFact{in.address, in.reason, result.failed_checks, std::nullopt,
                         result.backoff_s});
  }
  switch (phase_) {
    case Phase::kWaiting:
      if (in.healthy) TryLaunch();
      return;
    case Phase::kRunning: {
      if (!in.healthy || !result.listed) return;
      std::string why;
      const auto desired = DesiredPlan(&why);
      if (desired && DiffersFromCurrent(desired->first, desired->second)) {
        Morph(in.address + (result.first ? " joined" : " is healthy again"), desired->first,
              desired->second);
      }
      return;
    }
    case Phase::kRecovering:
      MaybeEndGeneration();
      return;
    default:
      return;
  }
}

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
        ending_ = Ending::kStop;
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
        if (!final_failure_) {
          final_failure_ = FinishAction{FinishAction::Outcome::kFailed,
                                        "the workers were killed on a second " + in.source +
                                            " before they stopped"};
        }
        Terminate("second " + in.source);
      } else if (gen_.deadlines.kill) {
        gen_.deadlines.kill = now_;  // impatient: SIGKILL now
      }
      return;
    case Phase::kFinished:
      return;
  }
}

bool Controller::SilenceWatched() const {
  return gen_.live && ending_ != Ending::kRecover && ending_ != Ending::kFinish;
}

void Controller::WatchSilence(const RankState& r) {
  if (const std::optional<double> silent_for = SilenceBound(r)) {
    gen_.silence_due = std::min(gen_.silence_due, r.last_heard + *silent_for);
  }
}

std::optional<double> Controller::SilenceBound(const RankState& r) const {
  if (!r.running || !r.started || r.stopped) return std::nullopt;
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

// ---- Decisions ---------------------------------------------------------------------------

std::optional<std::pair<GridPlan, std::vector<Machine>>> Controller::DesiredPlan(
    std::string* why) const {
  std::vector<std::string> out;
  std::vector<Machine> machines = pool_.Usable(&out);
  ShapeRequest request;
  for (const Machine& m : machines) request.machines.push_back({m.Address(), m.slots});
  request.segments = options_.segments;
  request.global_batch = options_.global_batch;
  request.chunk_size = options_.chunk_size;
  Result<GridPlan> plan = policy_->Plan(request);
  if (!plan.ok()) {
    *why = plan.status().message();
    if (plan.status().code() == Status::Code::kUnavailable) {
      *why += (out.empty() ? "" : "; out: " + Join(out, ", ")) + ": add machines to the list";
    }
    return std::nullopt;
  }
  return std::make_pair(std::move(*plan), std::move(machines));
}

bool Controller::DiffersFromCurrent(const GridPlan& desired,
                                    const std::vector<Machine>& machines) const {
  if (!gen_.live) return true;
  if (desired.stages != gen_.plan.stages || desired.replicas != gen_.plan.replicas) return true;
  for (size_t r = 0; r < desired.ranks.size(); ++r) {
    const Machine& want = machines[desired.ranks[r].machine];
    const Machine& have = gen_.machines[gen_.plan.ranks[r].machine];
    if (want.Address() != have.Address()) return true;
  }
  return false;
}

void Controller::TryLaunch() {
  std::string why;
  auto desired = DesiredPlan(&why);
  if (!desired) {
    ReleaseParked();  // a machine that comes later starts afresh
    phase_ = Phase::kWaiting;
    reason_ = why;
    if (why != waiting_reason_) {
      waiting_reason_ = why;
      Tell(WaitingFact{why});
    }
    return;
  }
  waiting_reason_.clear();
  std::map<int, ParkedWorker> kept = TakeParkedFor(desired->first, desired->second);
  std::optional<int64_t> expected;
  if (ending_ == Ending::kMorph && gen_.stopped_step >= 0 && gen_.stopped_steps_agree) {
    expected = gen_.stopped_step;
  }
  gen_ = Generation::Launched(gen_.number + 1, std::move(desired->first),
                              std::move(desired->second), now_);
  gen_.kept = static_cast<int>(kept.size());
  // A kept worker's heartbeat runs on from its last generation: its silence counts at once.
  for (const auto& [rank, worker] : kept) gen_.ranks[rank].heartbeats = true;
  phase_ = Phase::kRunning;
  reason_.clear();
  ending_ = Ending::kNone;
  actions_.push_back(LaunchAction{gen_.number, gen_.plan, gen_.machines, expected, std::move(kept)});
  KeepSpares();
}

// ---- Helpers -----------------------------------------------------------------------------

void Controller::Tell(const Fact& fact) {
  Narration told = Narrate(fact);
  told.fields.SetInt("generation", gen_.number);
  actions_.push_back(
      RecordAction{std::move(told.event), std::move(told.fields), std::move(told.line), told.error});
}

RankState* Controller::CurrentRank(int64_t generation, int rank) {
  return generation == gen_.number && gen_.Has(rank) ? &gen_.ranks[rank] : nullptr;
}

void Controller::SignalRunning(int signal_number) {
  for (size_t i = 0; i < gen_.ranks.size(); ++i) {
    if (gen_.ranks[i].running) Signal(static_cast<int>(i), signal_number);
  }
}

void Controller::Signal(int rank, int signal_number) {
  if (signal_number == SIGKILL && gen_.Has(rank)) gen_.ranks[rank].killed = true;
  actions_.push_back(SignalAction{gen_.number, rank, signal_number});
}

bool Controller::TearingDown() const {
  return ending_ == Ending::kRecover || ending_ == Ending::kFinish || gen_.deadlines.kill.has_value() ||
         gen_.deadlines.abandon.has_value();
}

std::vector<MachineView> Controller::Machines() const {
  std::vector<std::string> running;
  if (gen_.live) {
    for (const RankState& r : gen_.ranks) {
      if (r.running) running.push_back(gen_.machines[r.machine].Address());
    }
  }
  return pool_.Views(running);
}

std::vector<bool> Controller::RunningRanksMask() const {
  std::vector<bool> mask;
  for (const RankState& r : gen_.ranks) mask.push_back(gen_.live && r.running);
  return mask;
}

int Controller::ReadyRanks() const { return gen_.ready; }

std::vector<std::string> Controller::RankAddresses() const {
  std::vector<std::string> addresses;
  for (const RankState& r : gen_.ranks) addresses.push_back(gen_.machines[r.machine].Address());
  return addresses;
}

}  // namespace mitra::manager
