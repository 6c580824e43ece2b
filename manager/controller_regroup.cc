// Regrouping in place, the controller's half: standby workers started ahead of a grow, and
// letting parked workers go. Parking itself (SIGUSR2, kParked, keeping parked workers at a
// launch) is in controller.cc and controller_ending.cc. One class, controller.h.
#include <algorithm>
#include <map>
#include <set>

#include "manager/controller.h"

namespace mitra::manager {

void Controller::OnParked(int rank) {
  // Stopped as asked (or left its step as a peer failed), its part of the checkpoint on disk:
  // like an exit, but the process stays for the next generation.
  RankState& r = gen_.ranks[rank];
  if (!r.running || r.parked || r.killed) return;  // a killed rank's exit is near
  r.running = false;
  r.parked = true;
  parked_.Add(ParkedWorker{gen_.number, rank, gen_.MachineOf(rank).Address(),
                           gen_.plan.ranks[rank].local_rank});
  MaybeEndGeneration();
}

std::map<int, ParkedWorker> Controller::TakeParkedFor(const GridPlan& plan,
                                                      const std::vector<Machine>& machines) {
  std::vector<ParkedWorker> unneeded;
  std::map<int, ParkedWorker> kept = parked_.TakeFor(plan, machines, &unneeded);
  std::vector<ParkedWorker> released;
  for (ParkedWorker& w : unneeded) {
    // Standby workers left over stay as spares on the machines the job uses, up to --spares.
    const bool used = std::any_of(machines.begin(), machines.end(),
                                  [&](const Machine& m) { return m.Address() == w.machine; });
    if (w.generation == kStandbyGeneration && used && SparesOn(w.machine) < options_.spares) {
      parked_.Add(std::move(w));
    } else {
      released.push_back(std::move(w));
    }
  }
  if (!released.empty()) actions_.push_back(ReleaseAction{std::move(released)});
  return kept;
}

void Controller::Morph(const std::string& why, const GridPlan& desired,
                       const std::vector<Machine>& machines) {
  if (warm_up_) {
    warm_up_->why = why;  // the morph that follows plans on the machines of its own time
    return;
  }
  const bool all_park =
      gen_.live && gen_.AllReady() && !training_done_ &&
      std::all_of(gen_.ranks.begin(), gen_.ranks.end(),
                  [](const RankState& r) { return r.running && r.can_park; });
  // The ranks of `desired` beyond those the running generation has on the same machine: their
  // processes start now, as standby workers, while the job trains on.
  std::vector<const planner::RankPlacement*> new_ranks;
  if (all_park) {
    std::map<std::string, int> running_on;
    for (size_t r = 0; r < gen_.ranks.size(); ++r) {
      ++running_on[gen_.MachineOf(static_cast<int>(r)).Address()];
    }
    for (const planner::RankPlacement& p : desired.ranks) {
      if (p.local_rank >= running_on[machines[p.machine].Address()]) new_ranks.push_back(&p);
    }
  }
  if (new_ranks.empty()) {
    BeginMorph(why);
    return;
  }
  WarmUp warm_up{why, {}};
  WarmUpFact fact{why, {}};
  for (const planner::RankPlacement* p : new_ranks) {
    const Machine& machine = machines[p->machine];
    const int id = next_standby_id_++;
    warm_up.pending.insert(id);
    standby_[id] = ParkedWorker{kStandbyGeneration, id, machine.Address(), p->local_rank};
    fact.machines.push_back(machine.Address());
    actions_.push_back(StartStandbyAction{id, machine, p->local_rank});
  }
  warm_up_ = std::move(warm_up);
  gen_.deadlines.warm_up = now_ + options_.startup_timeout_s;
  Tell(fact);
}

void Controller::OnStandbyReport(const RankReport& in) {
  if (in.kind != RankReport::Kind::kParked) return;
  const auto it = standby_.find(in.rank);
  if (it == standby_.end()) return;
  ParkedWorker worker = it->second;
  standby_.erase(it);
  // Useful until the next generation is launched: while its grow warms up, or while the
  // running generation stops; or as a spare on a machine of the running generation.
  const bool spare =
      gen_.live && SparesOn(worker.machine) < options_.spares &&
      std::any_of(gen_.machines.begin(), gen_.machines.end(),
                  [&](const Machine& m) { return m.Address() == worker.machine; });
  const bool useful = warm_up_.has_value() || phase_ == Phase::kMorphing ||
                      phase_ == Phase::kRecovering || spare;
  if (!useful) {
    actions_.push_back(ReleaseAction{{worker}});
    return;
  }
  parked_.Add(std::move(worker));
  if (warm_up_ && warm_up_->pending.erase(in.rank) > 0 && warm_up_->pending.empty()) EndWarmUp();
}

void Controller::OnStandbyGone(int id, const std::string& reason) {
  const auto it = standby_.find(id);
  if (it == standby_.end()) return;
  const std::string address = it->second.machine;
  standby_.erase(it);
  const bool pending = warm_up_ && warm_up_->pending.erase(id) > 0;
  if (!pending) return;  // the morph went on without it
  // The machine is suspect, as after a failed start of a rank; the job it would have joined
  // never saw it.
  const MachinePool::Blame blame = pool_.BlameFailure(address, reason, now_);
  if (blame.check_now) actions_.push_back(CheckHostAction{*blame.check_now});
  std::string why;
  const auto desired = DesiredPlan(&why);
  Tell(StandbyFailedFact{address, reason,
                         desired && DiffersFromCurrent(desired->first, desired->second)});
  if (warm_up_->pending.empty()) EndWarmUp();
}

void Controller::EndWarmUp() {
  if (!warm_up_) return;
  const std::string why = warm_up_->why;
  std::vector<ParkedWorker> late;
  for (const int id : warm_up_->pending) {
    late.push_back(standby_.at(id));
    standby_.erase(id);
  }
  warm_up_.reset();
  gen_.deadlines.warm_up.reset();
  if (!late.empty()) actions_.push_back(ReleaseAction{std::move(late)});  // exit when they park
  std::string unused;
  const auto desired = DesiredPlan(&unused);
  if (desired && !DiffersFromCurrent(desired->first, desired->second)) {
    ReleaseParked();  // nothing changes after all: the running generation goes on
    return;
  }
  BeginMorph(why);
}

int Controller::SparesOn(const std::string& address) const {
  int n = parked_.Count(kStandbyGeneration, address);
  for (const auto& [id, worker] : standby_) n += worker.machine == address;
  return n;
}

void Controller::KeepSpares() {
  if (options_.spares <= 0 || !gen_.live) return;
  std::set<std::string> seen;
  for (const Machine& machine : gen_.machines) {
    if (!seen.insert(machine.Address()).second) continue;
    for (int n = SparesOn(machine.Address()); n < options_.spares; ++n) {
      const int id = next_standby_id_++;
      standby_[id] = ParkedWorker{kStandbyGeneration, id, machine.Address(), /*local_rank=*/-1};
      actions_.push_back(StartStandbyAction{id, machine, -1});
    }
  }
}

void Controller::ReleaseParked() {
  std::vector<ParkedWorker> workers = parked_.TakeAll();
  for (auto& [id, worker] : standby_) workers.push_back(std::move(worker));
  standby_.clear();
  if (!workers.empty()) actions_.push_back(ReleaseAction{std::move(workers)});
}

}  // namespace mitra::manager
