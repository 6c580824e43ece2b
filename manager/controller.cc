// The controller's core: its inputs dispatched, each rank's start, reports and exit, the launch
// of a generation and what follows the last exit of one. Planned changes are in
// controller_morph.cc, failures in controller_failure.cc, stops and signals in
// controller_stop.cc, deadlines in controller_deadlines.cc. One class, controller.h.
#include "manager/controller.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "common/overloaded.h"
#include "common/strings.h"
#include "contract/exit_codes.h"
#include "manager/narration.h"
#include "manager/state_placement.h"

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
      last_step_(options_.start_step),
      budget_(RestartBudgetOptions{options_.max_restarts, options_.restart_window_s}),
      standby_(options_.spares) {
  gen_.number = options_.first_generation - 1;
  corrections_ = options_.corrections;
}

std::vector<ControllerAction> Controller::Handle(const ControllerInput& input, double now) {
  now_ = now;
  actions_.clear();
  if (phase_ == Phase::kFinished) return {};
  std::visit(Overloaded{
                 [this](const StartInput& in) { OnStart(in); },
                 [this](const MachinesChanged& in) { OnMachinesChanged(in); },
                 [this](const GenerationLaunched& in) { OnLaunched(in); },
                 [this](const RankStarted& in) { OnRankStarted(in); },
                 [this](const RankStartFailed& in) { OnRankStartFailed(in); },
                 [this](const RankReport& in) { OnReport(in); },
                 [this](const RankExited& in) { OnExited(in); },
                 [this](const HostChecked& in) { OnHostChecked(in); },
                 [this](const StopInput& in) { OnStop(in); },
                 [this](const DrainMachine& in) { OnDrain(in); },
                 [this](const SlowMachine& in) { OnSlowMachine(in); },
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
    if (!gen_.AllReady() && ending_.Is(Ending::kNone)) next = std::min(next, StartDeadline());
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

void Controller::OnLaunched(const GenerationLaunched& in) {
  if (in.generation != gen_.number) return;
  LaunchedFact fact;
  fact.generation = gen_.number;
  fact.plan = gen_.plan;
  fact.program = options_.program;
  for (const RankPlacement& p : gen_.plan.ranks) {
    fact.machines.push_back(gen_.machines[p.machine].Address());
  }
  fact.pids = in.pids;
  fact.kept = in.kept;
  fact.resume_step = in.resume_step;
  fact.rendezvous = in.rendezvous;
  fact.launch_s = in.launch_s;
  fact.held_step = gen_.held_step;
  fact.held_partial = gen_.held_partial;
  Tell(fact);
  if (gen_.expected_step && in.resume_step != *gen_.expected_step) {
    Tell(StepLostFact{*gen_.expected_step, in.resume_step});
  }
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
  r.starting = true;
  switch (in.kind) {
    case RankReport::Kind::kStarting:
      return;
    case RankReport::Kind::kReady:
      r.can_park = in.can_park;
      r.can_hold = in.can_hold;
      if (!gen_.MarkReady(in.rank)) return;
      WatchSilence(r);  // ready: the heartbeat timeout applies from here on, at the latest
      if (gen_.AllReady()) {
        gen_.all_ready_at = now_;
        gen_.deadlines.starting_note.reset();
        slowest_start_s_ = std::max(slowest_start_s_, now_ - gen_.launched_at);
        if (phase_ == Phase::kRunning && gen_.starting_said) reason_.clear();
        Tell(AllReadyFact{static_cast<int>(gen_.ranks.size()), now_ - gen_.launched_at});
        if (morph_when_ready_ && phase_ == Phase::kRunning && ending_.Is(Ending::kNone)) {
          FollowMachineList(*std::exchange(morph_when_ready_, std::nullopt), nullptr);
        }
      }
      return;
    case RankReport::Kind::kHeartbeat:
      if (in.compute_s >= 0) r.compute_s = in.compute_s;
      if (!r.heartbeats) {
        r.heartbeats = true;
        WatchSilence(r);  // its bound just shrank to the heartbeat timeout
      }
      return;
    case RankReport::Kind::kCheckpoint:
      return;
    case RankReport::Kind::kRestored:
      if (in.rank == 0) {
        gen_.restore_s = in.seconds;
        gen_.sources = in.sources;
      }
      return;
    case RankReport::Kind::kParked:
      OnParked(in.rank, in.held);
      return;
    case RankReport::Kind::kStep:
      last_step_ = std::max(last_step_, in.step);
      last_step_s_ = in.seconds;
      CheckProfile(in.seconds);
      if (!gen_.first_step_seen) {
        gen_.first_step_seen = true;
        const bool first_training = !trained_;
        trained_ = true;
        budget_.OnStepTrained();
        if (ending_.ChangePending()) TellTrainingAgain(in.step, first_training);
        KeepSpares();
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
  if (in.generation == kStandbyGeneration && !standby_.Forget(in.generation, in.rank)) {
    OnStandbyGone(in.rank, "it " + in.exit.ToString() + " before it was ready");
    return;
  }
  if (standby_.Forget(in.generation, in.rank)) return;  // a parked worker ended: not kept now
  RankState* rank = CurrentRank(in.generation, in.rank);
  if (rank == nullptr || !rank->running) return;
  RankState& r = *rank;
  r.running = false;
  if (in.exit.ok()) {
    if (ending_.Is(Ending::kNone) && gen_.Running() > 0 && !gen_.deadlines.finish) {
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
    Fail(in.rank, what, /*blame_machine=*/true, /*machine_lost=*/in.exit.lost, &in);
  } else if (ending_.Is(Ending::kRecovery) && !trained_ && in.exit.signal == 0 &&
             in.exit.exit_code == kExitBadInput) {
    // Before the job's first step, a rank that refuses its input while the failure of a peer
    // is being recovered from is that failure's cause (the peer only lost it): a relaunch
    // would fail alike, so the job ends, saying why.
    Fail(in.rank, gen_.Where(in.rank) + " " + in.exit.ToString(), /*blame_machine=*/false,
         /*machine_lost=*/false, &in);
  }
  MaybeEndGeneration();
}

// ---- Launching ---------------------------------------------------------------------------

std::optional<std::pair<GridPlan, std::vector<Machine>>> Controller::DesiredPlan(
    std::string* why) const {
  std::vector<std::string> out;
  std::vector<Machine> machines = pool_.Usable(&out);
  ShapeRequest request;
  for (const Machine& m : machines) request.machines.push_back({m.Address(), m.slots});
  request.segments = options_.segments;
  request.global_batch = options_.global_batch;
  request.chunk_size = options_.chunk_size;
  request.corrections = corrections_;
  request.zero = options_.zero;
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

namespace {

// Where `corrections` hold the correction of `address` with `busy` ranks; -1 where they do not.
int IndexOf(const std::vector<planner::SpeedCorrection>& corrections, const std::string& address,
            int busy) {
  for (size_t i = 0; i < corrections.size(); ++i) {
    const planner::SpeedCorrection& c = corrections[i];
    if (c.address == address && c.busy == busy) return static_cast<int>(i);
  }
  return -1;
}

// Its factor; 1 where there is none.
double FactorOf(const std::vector<planner::SpeedCorrection>& corrections,
                const std::string& address, int busy) {
  const int i = IndexOf(corrections, address, busy);
  return i >= 0 ? corrections[i].factor : 1.0;
}

struct MachineFactor {
  int busy = 0;       // the generation's ranks on the machine
  double factor = 1;  // its steps over what the plan expected of it
};

// What each machine of `gen` (by index) took against its plan, its steps having taken
// `step_ratio` times the prediction: the median over its ranks of their latest compute over what
// the plan expected of them; the machines the step waits for (within kAlongside of the slowest)
// also take the part of the step's ratio that no computation explains (the step's ratio over
// the slowest machine's: their messages, their waits). A machine that computes at its planned
// pace next to one that does not is left as it is; every machine is `step_ratio` where a rank
// has not said its compute or the plan expected none.
std::map<int, MachineFactor> MachineFactors(const Generation& gen, double step_ratio) {
  std::map<int, std::vector<double>> ratios;  // machine -> its ranks' compute over the expected
  const std::vector<double>& expected = gen.plan.expected_compute_s;
  bool measured = expected.size() == gen.ranks.size();
  for (size_t r = 0; measured && r < gen.ranks.size(); ++r) {
    measured = gen.ranks[r].compute_s > 0 && expected[r] > 0;
    if (measured) ratios[gen.ranks[r].machine].push_back(gen.ranks[r].compute_s / expected[r]);
  }
  std::map<int, MachineFactor> out;
  for (const RankState& r : gen.ranks) ++out[r.machine].busy;
  if (!measured) {
    for (auto& [machine, f] : out) f.factor = step_ratio;
    return out;
  }
  double slowest = 0;
  for (auto& [machine, f] : out) {
    std::vector<double>& mine = ratios[machine];
    std::nth_element(mine.begin(), mine.begin() + mine.size() / 2, mine.end());
    f.factor = mine[mine.size() / 2];
    slowest = std::max(slowest, f.factor);
  }
  constexpr double kAlongside = 1.1;
  for (auto& [machine, f] : out) {
    if (f.factor * kAlongside >= slowest) f.factor *= step_ratio / slowest;
  }
  return out;
}

}  // namespace

void Controller::CheckProfile(double step_s) {
  const std::optional<ProfileCheck::Verdict> v = gen_.profile_check.Observe(step_s);
  if (!v) return;
  ProfileCheckFact fact{gen_.number, gen_.ShapeText(), v->predicted_s, v->measured_s, v->ratio, {}};
  if (v->disagrees) {
    for (const auto& [machine, f] : MachineFactors(gen_, v->ratio)) {
      fact.corrections.push_back(Correct(gen_.machines[machine].Address(), f.busy, f.factor));
    }
    gen_.profile_corrected = true;
  }
  Tell(fact);
}

planner::SpeedCorrection Controller::Correct(const std::string& address, int busy, double factor) {
  const double corrected = FactorOf(gen_.planned_with, address, busy) * factor;
  const int same = IndexOf(corrections_, address, busy);
  if (same < 0) {
    return corrections_.emplace_back(planner::SpeedCorrection{address, busy, corrected});
  }
  corrections_[same].factor = corrected;
  return corrections_[same];
}

double Controller::FoundAgainstPlan(const std::string& address, int busy) const {
  return FactorOf(corrections_, address, busy) / FactorOf(gen_.planned_with, address, busy);
}

bool Controller::DiffersFromCurrent(const GridPlan& desired,
                                    const std::vector<Machine>& machines) const {
  if (!gen_.live) return true;
  if (desired.stages != gen_.plan.stages || desired.replicas != gen_.plan.replicas) return true;
  if (desired.shares != gen_.plan.shares) return true;
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
  morph_when_ready_.reset();  // the new generation is planned on the list as it is
  // The parked workers keep their slots; the new ranks take the slots where those keep the
  // most of their state (as Morph placed them when it started standby workers).
  PlaceToKeepState(standby_.parked(), options_.segments, options_.segment_weights,
                   desired->second, &desired->first);
  std::map<int, ParkedWorker> kept = TakeParkedFor(desired->first, desired->second);
  const std::optional<int64_t> held_step = WholeHeldStep(kept, options_.segments);
  std::optional<int64_t> expected;
  if (ending_.Is(Ending::kMorph) && gen_.stopped_step >= 0 && gen_.stopped_steps_agree) {
    expected = gen_.stopped_step;
  }
  gen_ = Generation::Launched(gen_.number + 1, std::move(desired->first),
                              std::move(desired->second), now_);
  gen_.kept = static_cast<int>(kept.size());
  gen_.planned_with = corrections_;
  gen_.deadlines.starting_note = now_ + options_.starting_note_after_s;
  gen_.held_step = held_step;
  // Trained state, that is: before the job's first step every worker holds step 0's, which a
  // new worker builds as well.
  gen_.held_partial = !held_step && std::any_of(kept.begin(), kept.end(), [](const auto& kv) {
    return kv.second.held.step > 0;
  });
  gen_.expected_step = expected;
  // A kept worker's heartbeat runs on from its last generation: its silence counts at once.
  for (const auto& [rank, worker] : kept) gen_.ranks[rank].heartbeats = true;
  phase_ = Phase::kRunning;
  reason_.clear();
  ending_.Launched();
  actions_.push_back(
      LaunchAction{gen_.number, gen_.plan, gen_.machines, expected, std::move(kept), held_step});
  for (const std::string& machine : gen_.plan.unmeasured) {
    if (told_unmeasured_.insert(machine).second) Tell(UnmeasuredMachineFact{machine});
  }
}

// ---- A generation's end ------------------------------------------------------------------

void Controller::MaybeEndGeneration() {
  if (!gen_.live || gen_.Running() > 0) return;
  if (ending_.Is(Ending::kRecovery)) {
    // Wait for the failed machines' health checks, up to gen_.deadlines.health.
    if (pool_.CheckInFlight() && gen_.deadlines.health) {
      NoteRanksExited();
      return;
    }
  }
  gen_.live = false;
  NoteRanksExited();
  gen_.deadlines = Deadlines{};
  if (const std::optional<FinishAction> end = ending_.Outcome()) {
    Finish(end->outcome, end->reason);
  } else {
    TryLaunch();  // a morph or a recovery
  }
}

void Controller::NoteRanksExited() {
  if (gen_.exit_noted) return;
  gen_.exit_noted = true;
  ending_.RanksExited(now_);
}

void Controller::TellTrainingAgain(int64_t step, bool first_training) {
  const GenerationEnding::Change change = ending_.TakeChange().value();
  TrainingAgainFact fact;
  fact.kind = change.kind;
  fact.first_training = first_training;
  fact.step = step;
  fact.shape = gen_.ShapeText();
  fact.kept = gen_.kept;
  fact.started = static_cast<int>(gen_.ranks.size()) - gen_.kept;
  fact.downtime_s = now_ - change.detected;
  fact.stop_s = change.ranks_exited - change.detected;
  fact.relaunch_s = gen_.launched_at - change.ranks_exited;
  const double ready_at = gen_.all_ready_at >= 0 ? gen_.all_ready_at : now_;
  fact.ready_s = ready_at - gen_.launched_at;
  fact.load_s = std::min(gen_.restore_s, now_ - ready_at);
  fact.first_step_s = now_ - ready_at - fact.load_s;
  fact.sources = gen_.sources;
  Tell(fact);
}

void Controller::Finish(FinishAction::Outcome outcome, const std::string& reason) {
  ReleaseParked();
  phase_ = Phase::kFinished;
  gen_.live = false;
  actions_.push_back(FinishAction{outcome, reason});
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
  return ending_.Is(Ending::kRecovery) || ending_.Is(Ending::kJobEnd) || gen_.deadlines.kill.has_value() ||
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
