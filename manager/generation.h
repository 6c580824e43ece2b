// The generation that runs now, as the controller follows it: the plan it was launched in, the
// machines it runs on, and each rank's state (running, ready, last heard from, left training).
//
// Plain data and the queries the controller asks of it; every decision stays in controller.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "manager/machine_list.h"
#include "planner/grid.h"

namespace mitra::manager {

struct RankState {
  int machine = 0;  // index into Generation::machines
  int64_t pid = 0;
  bool running = false;     // launched and not yet exited
  bool started = false;     // its process is running (RankStarted)
  bool ready = false;
  bool heartbeats = false;  // has sent a heartbeat: hang detection is on
  bool stopped = false;     // printed `stopped`: may keep working, no heartbeats expected
  bool finished = false;    // ... at the job's last step
  double last_heard = 0;    // since started: the start, else the last record
};

struct Generation {
  planner::GridPlan plan;
  std::vector<Machine> machines;  // indexed by plan.ranks[r].machine
  std::vector<RankState> ranks;   // indexed by rank
  int ready = 0;                  // ranks that reported ready (MarkReady)

  // Every rank of `plan` running (until a start failure or an exit says otherwise), heard from
  // at `now`.
  static Generation Launched(planner::GridPlan plan, std::vector<Machine> machines, double now);

  bool Has(int rank) const { return rank >= 0 && rank < static_cast<int>(ranks.size()); }
  // Marks `rank` ready; false when it was already. Kept as a count: asked on every input.
  bool MarkReady(int rank);
  int Running() const;
  bool AllReady() const { return ready == static_cast<int>(ranks.size()); }
  bool AllFinished() const;
  std::vector<int64_t> RunningPids() const;
  const Machine& MachineOf(int rank) const { return machines[ranks[rank].machine]; }
  // "rank 3 on 127.0.0.2 (pid 4242)"; the machine only when it tells something.
  std::string Where(int rank) const;
  std::string ShapeText() const;  // "2 x 3"
};

}  // namespace mitra::manager
