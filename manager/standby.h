// Standby workers: processes started outside any generation's ranks, and the parked workers
// that wait with them for a place (docs/manager.md, "Regrouping in place"). A grow starts its
// new workers first, as standby workers, and its morph waits until they have parked (the
// warm-up); --spares keeps standby workers on every machine of the running generation; a morph
// or recovery leaves parked workers behind. A launch gives parked workers the ranks on their
// machines and lets the others go.
//
// This is the bookkeeping: who is starting, who is parked, what the warm-up waits for, how many
// spares a machine has. The controller (controller.h) decides when to start, keep and let go
// of them, and returns the actions. Not thread-safe: the controller owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "manager/machine_list.h"
#include "manager/parked_workers.h"
#include "mitra/contract/placement.h"
#include "planner/grid.h"

namespace mitra::manager {

// Standby workers are known by this generation and their id as the rank.
inline constexpr int64_t kStandbyGeneration = -1;

// Starts a standby worker on `machine` (MITRA_STANDBY=1): it loads, parks with no place, and a
// later generation keeps it. Its reports and exit come as generation kStandbyGeneration, rank
// `id`.
struct StartStandbyAction {
  int id = 0;
  Machine machine;
  int local_rank = 0;  // the place it is meant for on its machine; -1: a spare
  // The stage of the planned grid that place has (MITRA_STANDBY_STAGE), or the stage a spare is
  // meant for (KeepSpares): the worker builds its segments while it waits.
  std::optional<contract::StandbyStage> stage;
};

class StandbyWorkers {
 public:
  // `spares`: standby workers kept on each machine of the running generation (--spares).
  explicit StandbyWorkers(int spares) : spares_(spares) {}

  // ---- Starting ----------------------------------------------------------------------------

  // A standby worker to start on `machine`, meant for `local_rank` there (-1: a spare); it
  // counts as starting until it parks or is gone.
  StartStandbyAction Start(const Machine& machine, int local_rank);
  // Spares to start so that every machine of `machines` has `spares` standby workers, parked or
  // starting. Each is meant for a stage of `plan`, the running generation's grid, and builds it
  // while it waits: a failed rank of that stage takes it over without building anything, and
  // one of another stage finds the memory its build and first step take touched already. A
  // machine's spares spread over the stages: a new one is meant for the stage its spares cover
  // least (the lowest of those).
  std::vector<StartStandbyAction> KeepSpares(const std::vector<Machine>& machines,
                                             const planner::GridPlan& plan);
  // How many standby workers `address` has, parked or starting.
  int SparesOn(const std::string& address) const;
  // Whether `address` has fewer standby workers than `spares`.
  bool WantsSpare(const std::string& address) const { return SparesOn(address) < spares_; }
  // Standby worker `id` parked or is gone: no longer starting. Nullopt when it was not
  // starting (let go already, or unknown).
  std::optional<ParkedWorker> TakeStarting(int id);

  // ---- Parked workers ----------------------------------------------------------------------

  void Park(ParkedWorker worker) { parked_.Add(std::move(worker)); }
  // The process of the worker parked as `rank` of `generation` ended; false if none was.
  bool Forget(int64_t generation, int rank) { return parked_.Remove(generation, rank); }
  // The parked workers (standby workers among them, holding nothing).
  const std::vector<ParkedWorker>& parked() const { return parked_.workers(); }
  // The parked workers the ranks of `plan` (on `machines`) take, by rank (ParkedWorkers::
  // TakeFor). Of the others, standby workers on one of `machines` stay as spares (up to
  // `spares` a machine); the rest are added to `released`.
  std::map<int, ParkedWorker> TakeFor(const planner::GridPlan& plan,
                                      const std::vector<Machine>& machines,
                                      std::vector<ParkedWorker>* released);
  // Every parked worker and every standby worker still starting, taken: to be let go.
  std::vector<ParkedWorker> TakeAll();

  // ---- The warm-up of a grow ---------------------------------------------------------------

  // A grow's morph (`why`) waits for the standby workers `ids` to park.
  void BeginWarmUp(std::string why, std::set<int> ids);
  bool warming_up() const { return warm_up_.has_value(); }
  // A later change while warming up: the morph that follows plans on the machines of its own
  // time, and says why with the latest reason.
  void SetWarmUpReason(std::string why) { warm_up_->why = std::move(why); }
  // Standby worker `id` parked or is gone; true when the warm-up was waiting for it.
  bool Arrived(int id);
  // Warming up and waiting for nothing more.
  bool WarmUpComplete() const { return warm_up_ && warm_up_->pending.empty(); }
  struct EndedWarmUp {
    std::string why;
    // The standby workers it was still waiting for, no longer starting: to be let go (they
    // exit when they park).
    std::vector<ParkedWorker> late;
  };
  // Ends the warm-up; nullopt when there was none.
  std::optional<EndedWarmUp> EndWarmUp();
  // A morph begins without waiting: the warm-up is over, but its workers still starting are
  // kept if they park before the launch.
  void DropWarmUp() { warm_up_.reset(); }

 private:
  struct WarmUp {
    std::string why;
    std::set<int> pending;  // ids not parked yet
  };

  // The stages of `plan` the spares of `address` (starting or parked) are meant for, counted.
  std::vector<int> StagesCovered(const std::string& address, const planner::GridPlan& plan) const;

  int spares_ = 0;
  int next_id_ = 0;
  std::map<int, int> meant_for_;  // a spare's id -> the stage it builds (of the plan then)
  ParkedWorkers parked_;
  std::map<int, ParkedWorker> starting_;  // standby workers not parked yet, by id
  std::optional<WarmUp> warm_up_;
};

}  // namespace mitra::manager
