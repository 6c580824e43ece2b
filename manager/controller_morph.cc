// Planned changes, the controller's half: the machine list changes, drains, machines that pass
// their health check, and the morph that follows (docs/manager.md, "Planned change: morph");
// regrouping in place: ranks that park, standby workers started ahead of a grow, spares, and
// the parked workers a launch keeps or lets go (standby.h keeps their books). One class,
// controller.h.
#include <signal.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "manager/controller.h"
#include "manager/state_placement.h"

namespace mitra::manager {
namespace {

// "1 x 2", "1 x 2, shares 5,3".
std::string PlanText(const GridPlan& plan) {
  return std::to_string(plan.stages) + " x " + std::to_string(plan.replicas) +
         (plan.shares.empty() ? "" : ", shares " + planner::SharesText(plan.shares));
}

}  // namespace

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
      if (!gen_.AllReady()) {
        // Workers still starting cannot keep their state through a morph yet: it waits.
        fact.action = Action::kAfterReady;
        fact.starting = static_cast<int>(gen_.ranks.size()) - gen_.ready;
        morph_when_ready_ = "machine list changed: " + fact.change;
        Tell(fact);
        return;
      }
      FollowMachineList("machine list changed: " + fact.change, &fact);
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

void Controller::FollowMachineList(const std::string& why, ListChangedFact* fact) {
  using Action = ListChangedFact::Action;
  const auto tell = [&](Action action, const std::string& ignored_why = "") {
    if (fact == nullptr) return;
    fact->action = action;
    fact->why = ignored_why;
    Tell(*fact);
  };
  std::string unplanned;
  const auto desired = DesiredPlan(&unplanned);
  if (desired && !DiffersFromCurrent(desired->first, desired->second)) return;
  // A machine the generation runs on left or lost slots: the job moves off it now.
  // Otherwise the machines only grew, and new workers may start before the morph.
  const bool shrunk = std::any_of(gen_.machines.begin(), gen_.machines.end(),
                                  [&](const Machine& m) { return pool_.Shrunk(m); });
  if (desired && !shrunk) {
    tell(Action::kMorph);
    Morph(why, desired->first, desired->second);
    return;
  }
  if (!desired && !shrunk) {
    // Fewer usable slots than stages: the running generation goes on where it is.
    tell(Action::kIgnored, unplanned);
    return;
  }
  tell(Action::kMorph);
  BeginMorph(why);
}

void Controller::OnSlowMachine(const SlowMachine& in) {
  using Action = SlowMachineFact::Action;
  SlowMachineFact fact;
  fact.machine = in.address;
  fact.ratio = in.ratio;
  const int busy = static_cast<int>(
      std::count_if(gen_.ranks.begin(), gen_.ranks.end(), [&](const RankState& r) {
        return gen_.machines[r.machine].Address() == in.address;
      }));
  if (!policy_->WeighsSpeeds() || !gen_.live || busy == 0 || !(in.ratio > 0)) {
    Tell(fact);  // kUnweighed; a machine the job left since is judged again where it returns
    return;
  }
  if (busy == static_cast<int>(gen_.ranks.size())) {
    fact.action = Action::kAlone;
    Tell(fact);
    return;
  }
  // Its steps against its peers'. Where the generation's profile check corrected every machine
  // from the same steps already, the two do not compound: the machine is found at least `ratio`
  // times slower than its peers were, and no less slow than the check found it.
  double factor = in.ratio;
  if (gen_.profile_corrected) {
    std::map<int, int> ranks_on;  // machine index -> the generation's ranks there
    for (const RankState& r : gen_.ranks) ++ranks_on[r.machine];
    std::vector<double> peers;  // what the check found of every other machine
    for (const auto& [machine, ranks] : ranks_on) {
      const std::string address = gen_.machines[machine].Address();
      if (address != in.address) peers.push_back(FoundAgainstPlan(address, ranks));
    }
    std::nth_element(peers.begin(), peers.begin() + peers.size() / 2, peers.end());
    const double peer = peers.empty() ? 1.0 : peers[peers.size() / 2];
    factor = std::max(FoundAgainstPlan(in.address, busy), peer * in.ratio);
  }
  fact.correction = Correct(in.address, busy, factor);
  if (phase_ != Phase::kRunning) {
    fact.action = Action::kFolded;
    Tell(fact);
    return;
  }
  std::string why;
  const auto desired = DesiredPlan(&why);
  if (!desired || !DiffersFromCurrent(desired->first, desired->second)) {
    fact.action = Action::kKeep;
    fact.plan = PlanText(gen_.plan);
    Tell(fact);
    return;
  }
  fact.action = Action::kReplan;
  fact.plan = PlanText(desired->first);
  Tell(fact);
  Morph("re-planning: " + in.address + " is slower than planned", desired->first,
        desired->second);
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
      const std::string why = in.address + (result.first ? " joined" : " is healthy again");
      if (!gen_.AllReady()) {
        morph_when_ready_ = why;  // as a list change's morph waits
        return;
      }
      FollowMachineList(why, nullptr);
      return;
    }
    case Phase::kRecovering:
      MaybeEndGeneration();
      return;
    default:
      return;
  }
}

void Controller::BeginMorph(const std::string& why) {
  if (training_done_) {
    // The job has trained its last step; the ranks only finish their own work.
    Tell(MorphFact{why, gen_.ShapeText(), last_step_, gen_.Running(), /*skipped=*/true});
    return;
  }
  // A grow warming up goes on as this morph; standby workers that park before the launch are
  // still kept.
  standby_.DropWarmUp();
  gen_.deadlines.warm_up.reset();
  ending_.BeginMorph(now_);
  phase_ = Phase::kMorphing;
  reason_ = why;
  const StopKind kind = gen_.AllReady() && EveryRankCanPark() && KeptWorkersWouldHoldEveryStage()
                            ? StopKind::kHold
                            : StopKind::kPark;
  Tell(MorphFact{why, gen_.ShapeText(), last_step_, gen_.Running(), /*skipped=*/false,
                 kind == StopKind::kHold});
  AskRanksToStop(kind);
}

void Controller::Morph(const std::string& why, const GridPlan& desired,
                       const std::vector<Machine>& machines) {
  if (standby_.warming_up()) {
    standby_.SetWarmUpReason(why);  // the morph that follows plans on the machines of its time
    return;
  }
  const bool all_park =
      gen_.live && gen_.AllReady() && !training_done_ &&
      std::all_of(gen_.ranks.begin(), gen_.ranks.end(),
                  [](const RankState& r) { return r.running && r.can_park; });
  // The ranks of `desired` beyond those the running generation has on the same machine: their
  // processes start now, as standby workers, while the job trains on. Which ranks those are
  // depends on the slots the kept workers' ranks take, as the launch will place them.
  GridPlan placed = desired;
  std::vector<const planner::RankPlacement*> new_ranks;
  if (all_park) {
    PlaceToKeepState(HoldersOnceParked(), options_.segments, options_.segment_weights, machines,
                     &placed);
    std::map<std::string, int> running_on;
    for (size_t r = 0; r < gen_.ranks.size(); ++r) {
      ++running_on[gen_.MachineOf(static_cast<int>(r)).Address()];
    }
    for (const planner::RankPlacement& p : placed.ranks) {
      if (p.local_rank >= running_on[machines[p.machine].Address()]) new_ranks.push_back(&p);
    }
  }
  if (new_ranks.empty()) {
    BeginMorph(why);
    return;
  }
  std::set<int> ids;
  WarmUpFact fact{why, {}};
  for (const planner::RankPlacement* p : new_ranks) {
    const Machine& machine = machines[p->machine];
    StartStandbyAction start = standby_.Start(machine, p->local_rank);
    const contract::GridPosition at = placed.stage_map.PositionOf(p->rank);
    start.stage = contract::StandbyStage{at.stage, placed.stages,
                                         planner::ReplicaPartition(placed.partition, at.replica)};
    ids.insert(start.id);
    fact.machines.push_back(machine.Address());
    actions_.push_back(std::move(start));
  }
  standby_.BeginWarmUp(why, std::move(ids));
  gen_.deadlines.warm_up = now_ + options_.startup_timeout_s;
  Tell(fact);
}

void Controller::OnParked(int rank, const HeldSegments& held) {
  // Stopped as asked (or left its step as a peer failed), its state on disk or in memory: like
  // an exit, but the process stays for the next generation.
  RankState& r = gen_.ranks[rank];
  if (!r.running || r.parked || r.killed) return;  // a killed rank's exit is near
  // Nobody asked: a peer failed and this rank saw it first (its rendezvous or a message failed).
  // That is a failure to recover from, not the end of the job.
  const bool unasked = ending_.Is(Ending::kNone) && !TearingDown();
  r.running = false;
  r.parked = true;
  standby_.Park(ParkedWorker{gen_.number, rank, gen_.MachineOf(rank).Address(),
                             gen_.plan.ranks[rank].local_rank, held});
  if (unasked) {
    Fail(std::nullopt, gen_.Where(rank) + " left its generation: a peer failed",
         /*blame_machine=*/false, /*machine_lost=*/false);
  }
  MaybeEndGeneration();
}

bool Controller::KeptWorkersWouldHoldEveryStage() {
  std::string unused;
  const auto desired = DesiredPlan(&unused);
  if (!desired || !gen_.live) return false;
  // A rank that cannot hold its stage's whole state (ZeRO-1 shards the optimizer's) parks
  // holding nothing: the state must reach storage.
  if (std::any_of(gen_.ranks.begin(), gen_.ranks.end(),
                  [](const RankState& r) { return !r.can_hold; })) {
    return false;
  }
  // The running ranks as the workers they would be once parked, each holding its stage (as
  // stage s of S: segments [s, s + 1) of S suffice to tell whole from not).
  ParkedWorkers would_park;
  for (size_t r = 0; r < gen_.ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    const int stage = gen_.plan.stage_map.PositionOf(rank).stage;
    would_park.Add(ParkedWorker{gen_.number, rank, gen_.MachineOf(rank).Address(),
                                gen_.plan.ranks[r].local_rank, HeldSegments{0, stage, stage + 1}});
  }
  std::vector<ParkedWorker> left;
  const std::map<int, ParkedWorker> kept = would_park.TakeFor(desired->first, desired->second, &left);
  return WholeHeldStep(kept, gen_.plan.stages).has_value();
}

std::vector<ParkedWorker> Controller::HoldersOnceParked() {
  std::vector<ParkedWorker> holders;
  if (!KeptWorkersWouldHoldEveryStage()) return holders;
  const std::optional<std::vector<HeldSegments>> held = SegmentsByRank(gen_.plan, options_.segments);
  if (!held) return holders;
  for (size_t r = 0; r < gen_.ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    holders.push_back(ParkedWorker{gen_.number, rank, gen_.MachineOf(rank).Address(),
                                   gen_.plan.ranks[r].local_rank, (*held)[r]});
  }
  return holders;
}

std::map<int, ParkedWorker> Controller::TakeParkedFor(const GridPlan& plan,
                                                      const std::vector<Machine>& machines) {
  std::vector<ParkedWorker> released;
  std::map<int, ParkedWorker> kept = standby_.TakeFor(plan, machines, &released);
  if (!released.empty()) actions_.push_back(ReleaseAction{std::move(released)});
  return kept;
}

bool Controller::RunsOn(const std::string& address) const {
  return gen_.live && std::any_of(gen_.machines.begin(), gen_.machines.end(),
                                  [&](const Machine& m) { return m.Address() == address; });
}

void Controller::OnStandbyReport(const RankReport& in) {
  if (in.kind != RankReport::Kind::kParked) return;
  std::optional<ParkedWorker> worker = standby_.TakeStarting(in.rank);
  if (!worker) return;
  // Useful until the next generation is launched: while its grow warms up, or while the
  // running generation stops; or as a spare on a machine of the running generation.
  const bool spare = RunsOn(worker->machine) && standby_.WantsSpare(worker->machine);
  const bool useful = standby_.warming_up() || phase_ == Phase::kMorphing ||
                      phase_ == Phase::kRecovering || spare;
  if (!useful) {
    actions_.push_back(ReleaseAction{{*worker}});
    return;
  }
  standby_.Park(std::move(*worker));
  if (standby_.Arrived(in.rank) && standby_.WarmUpComplete()) EndWarmUp();
}

void Controller::OnStandbyGone(int id, const std::string& reason) {
  const std::optional<ParkedWorker> worker = standby_.TakeStarting(id);
  if (!worker) return;
  if (!standby_.Arrived(id)) return;  // the morph went on without it
  // The machine is suspect, as after a failed start of a rank; the job it would have joined
  // never saw it.
  const MachinePool::Blame blame = pool_.BlameFailure(worker->machine, reason, now_);
  if (blame.check_now) actions_.push_back(CheckHostAction{*blame.check_now});
  std::string why;
  const auto desired = DesiredPlan(&why);
  Tell(StandbyFailedFact{worker->machine, reason,
                         desired && DiffersFromCurrent(desired->first, desired->second)});
  if (standby_.WarmUpComplete()) EndWarmUp();
}

void Controller::EndWarmUp() {
  std::optional<StandbyWorkers::EndedWarmUp> ended = standby_.EndWarmUp();
  if (!ended) return;
  gen_.deadlines.warm_up.reset();
  if (!ended->late.empty()) {
    actions_.push_back(ReleaseAction{std::move(ended->late)});  // they exit when they park
  }
  std::string unused;
  const auto desired = DesiredPlan(&unused);
  if (desired && !DiffersFromCurrent(desired->first, desired->second)) {
    ReleaseParked();  // nothing changes after all: the running generation goes on
    return;
  }
  BeginMorph(ended->why);
}

void Controller::KeepSpares() {
  if (options_.spares <= 0 || !gen_.live) return;
  for (StartStandbyAction& start : standby_.KeepSpares(gen_.machines, gen_.plan)) {
    actions_.push_back(std::move(start));
  }
}

void Controller::ReleaseParked() {
  std::vector<ParkedWorker> workers = standby_.TakeAll();
  if (!workers.empty()) actions_.push_back(ReleaseAction{std::move(workers)});
}

}  // namespace mitra::manager
