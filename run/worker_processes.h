// WorkerProcesses: the run loop's book of the worker processes it started (docs/manager.md,
// "Layers"): which process is which rank of the running generation, which workers are parked
// (by the generation and rank they parked as, or a standby worker's id), where the events of
// a kept worker go now, and which released workers have not exited yet.
//
// A worker's events carry the generation and rank it was started as; a parked worker kept by a
// later generation is that generation's rank now, so its events are routed there (Place). A
// process that exits is forgotten everywhere.
//
// A value the loop owns: it starts, signals and reads nothing itself. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "launcher/process_runner.h"
#include "manager/failure_excerpt.h"
#include "manager/machine_list.h"
#include "manager/standby.h"

namespace mitra::run {

// One worker process, as the loop knows it.
struct LiveRank {
  launcher::ProcessRunner* runner = nullptr;  // null: its start failed
  launcher::ProcessId id = 0;
  int64_t pid = 0;
  std::string machine;  // address
  manager::Machine where;
  bool stopped_record = false;  // it printed `stopped`
  double launched_s = 0;  // monotonic: its process started, or the parked worker was kept
  manager::FailureExcerpt output;  // what it printed, once it exited
};

class WorkerProcesses {
 public:
  // A process, as its runner names it.
  using Key = std::pair<const launcher::ProcessRunner*, launcher::ProcessId>;
  // A worker's place: a generation and a rank (manager::kStandbyGeneration and an id for a
  // standby worker).
  using Place = std::pair<int64_t, int>;

  // A new generation launches: its ranks are added as they start.
  void BeginGeneration(int64_t generation);
  int64_t generation() const { return generation_; }
  // Rank `rank` of the running generation, made when absent.
  LiveRank& Add(int rank) { return ranks_[rank]; }
  // Rank `rank` of `generation` when that generation runs now; null otherwise.
  LiveRank* Find(int64_t generation, int rank);
  const std::map<int, LiveRank>& ranks() const { return ranks_; }

  // Rank `rank` of the running generation parked: it is kept under its place, to be kept by a
  // later generation or released. No-op for a rank whose start failed.
  void Parked(int rank);
  // A standby worker started: parked from its start, under (kStandbyGeneration, id).
  void AddStandby(int id, LiveRank live);
  // Takes the parked worker of `parked_as` out of the book, to keep or to let go; nullopt when
  // it is gone (it exited while parked).
  std::optional<LiveRank> TakeParked(const Place& parked_as);
  // A worker taken out is `place` now (it was told so): its events go there.
  void Kept(const LiveRank& worker, const Place& place);
  // A worker taken out was told to exit: it is waited for until it does.
  void Released(const LiveRank& worker);
  bool AnyReleased() const { return !released_.empty(); }

  // Where an event of process `key`, which it sent as `sent_as`, belongs now: a kept worker's
  // new place, else `sent_as`.
  Place Route(const Key& key, const Place& sent_as) const;
  // Process `key` exited: forgotten everywhere (routes, parked, released).
  void Exited(const Key& key);

 private:
  int64_t generation_ = -1;
  std::map<int, LiveRank> ranks_;        // of the running generation
  std::map<Place, LiveRank> parked_;     // by the place they parked as
  std::map<Key, Place> routes_;          // a kept worker's place now
  std::set<Key> released_;               // told to exit, not exited yet
};

}  // namespace mitra::run
