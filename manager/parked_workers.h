// The workers that are parked: they stopped when a morph asked them to (SIGUSR2), their part of
// the checkpoint on disk, and wait alive for a place in the next generation
// (docs/manager.md, "Regrouping in place"). The controller hands each to a rank of the next
// launch on the same machine, or lets it go.
//
// Plain data and the matching; the controller decides when.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "manager/machine_list.h"
#include "planner/grid.h"

namespace mitra::manager {

// The state a parked worker holds in memory (docs/manager.md, "State from peers"): that of
// segments [first, end) after `step` steps; step -1 when it holds none (a standby worker, or
// one that lost its state).
struct HeldSegments {
  int64_t step = -1;
  int first = 0, end = 0;
  bool Holds(int segment, int64_t at_step) const {
    return step >= 0 && step == at_step && segment >= first && segment < end;
  }
};

// Where a new generation's ranks took their state from, as rank 0 reported it (`restored`):
// how many ranks kept their own, took it from peers or read the checkpoint, and the bytes sent
// between ranks at what rate.
struct StateSources {
  int kept = 0, peer = 0, checkpoint = 0;
  int64_t peer_bytes = 0;
  double peer_bytes_per_s = 0;
};

// A parked worker, known by the generation and rank it last trained as.
struct ParkedWorker {
  int64_t generation = 0;
  int rank = 0;
  std::string machine;  // Machine::Address()
  int local_rank = 0;   // its place among the ranks on that machine
  HeldSegments held = {};
};

// The newest step whose state `workers` hold, between them, for every one of `segments`
// segments: the step a generation they make up resumes from without storage. nullopt when
// no step is whole (a stage's every holder gone, or holders of different steps after a failure
// struck during a step).
std::optional<int64_t> WholeHeldStep(const std::map<int, ParkedWorker>& workers, int segments);

class ParkedWorkers {
 public:
  void Add(ParkedWorker worker) { workers_.push_back(std::move(worker)); }
  bool empty() const { return workers_.empty(); }
  size_t size() const { return workers_.size(); }

  // Takes every parked worker that a rank of `plan` (on `machines`) can use: one on the rank's
  // machine with its local rank (a GPU stays with its process), else any on that machine. The
  // map goes from the new rank to the worker that takes it; `left` gets the rest, which nothing
  // needs. Leaves none parked.
  std::map<int, ParkedWorker> TakeFor(const planner::GridPlan& plan,
                                      const std::vector<Machine>& machines,
                                      std::vector<ParkedWorker>* left);
  // Takes all of them.
  std::vector<ParkedWorker> TakeAll();
  const std::vector<ParkedWorker>& workers() const { return workers_; }
  // Forgets the one that parked as `rank` of `generation` (its process ended); false if none.
  bool Remove(int64_t generation, int rank);
  // How many parked as generation `generation` on `machine`.
  int Count(int64_t generation, const std::string& machine) const;

 private:
  std::vector<ParkedWorker> workers_;
};

}  // namespace mitra::manager
