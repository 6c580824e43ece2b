// The generation that runs now, as the controller follows it: the plan it was launched in, the
// machines it runs on, each rank's state (running, ready, last heard from, left training), and
// everything else that lives exactly as long as the generation: what its ranks said when they
// stopped, when it was launched and asked to stop, and its deadlines. A launch makes a new
// Generation, so nothing of the previous one leaks into the next.
//
// Plain data and the queries the controller asks of it; every decision stays in controller.h.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "manager/machine_list.h"
#include "manager/parked_workers.h"
#include "manager/profile_check.h"
#include "planner/grid.h"

namespace mitra::manager {

struct RankState {
  int machine = 0;  // index into Generation::machines
  int64_t pid = 0;
  bool running = false;     // launched and not yet exited
  bool started = false;     // its process is running (RankStarted)
  bool ready = false;
  bool starting = false;    // has said a word: its program runs (RankReport::Kind::kStarting)
  bool heartbeats = false;  // has sent a heartbeat: hang detection is on
  bool stopped = false;     // printed `stopped`: may keep working (Controller::SilenceBound)
  bool can_park = false;    // said so when ready: a morph may ask it to park (SIGUSR2)
  bool can_hold = true;     // said so when ready: parked, it holds its stage's whole state
  bool parked = false;      // parked: no longer running, its process waits for a placement
  bool killed = false;      // sent SIGKILL: a `parked` that crosses the signal keeps nothing
  bool finished = false;    // ... at the job's last step
  double last_heard = 0;    // since started: the start, else the last record
  // Its latest heartbeat's mean compute per step (RankReport::compute_s); < 0: none yet.
  double compute_s = -1;
};

// What a generation waits for, and until when; each is set by the step that starts waiting for
// something and cleared when it comes.
struct Deadlines {
  std::optional<double> stop;     // SIGUSR1 sent: every rank must exit by then
  std::optional<double> finish;   // a rank finished: the others must follow by then
  std::optional<double> kill;     // SIGTERM sent: SIGKILL then
  std::optional<double> abandon;  // SIGKILL sent: stop waiting for exits then
  std::optional<double> health;   // a failure: stop waiting for health checks then
  std::optional<double> warm_up;  // standby workers started: morph without the late ones then
  std::optional<double> starting_note;  // not every rank ready: say which are still starting
  double Earliest() const;        // infinity when none is set
};

struct Generation {
  // The generation's number (the run directory's logs/gen-N); before the first launch, one less
  // than the first.
  int64_t number = -1;
  bool live = false;  // launched, and not every rank has exited yet
  planner::GridPlan plan;
  std::vector<Machine> machines;  // indexed by plan.ranks[r].machine
  std::vector<RankState> ranks;   // indexed by rank
  int ready = 0;                  // ranks that reported ready (MarkReady)

  double launched_at = 0;
  // The step the checkpoint it resumes from must hold (a planned morph's), if any.
  std::optional<int64_t> expected_step;
  int kept = 0;               // ranks taken by parked workers of an earlier generation
  std::optional<int64_t> held_step;  // the step the kept workers hold whole (LaunchAction)
  bool held_partial = false;  // they hold some state, but no step whole
  double all_ready_at = -1;   // every rank reported ready; -1: not yet
  double restore_s = 0;       // rank 0's restore of the checkpoint
  std::optional<StateSources> sources;  // where the ranks' state came from (rank 0's `restored`)

  double stop_signalled = 0;  // SIGUSR1 sent (else the launch): what `stopped` is timed from
  bool first_step_seen = false;
  bool starting_said = false;  // the reason says which ranks are still starting
  ProfileCheck profile_check;  // its steps against the plan's prediction
  // The speed corrections its plan was made with: what it measures corrects these, however
  // many findings it makes (a straggler and the profile check measure the same steps).
  std::vector<planner::SpeedCorrection> planned_with;
  bool profile_corrected = false;  // its profile check corrected every machine it runs on
  int64_t stopped_step = -1;  // the step every rank reported in `stopped`, if they agree
  bool stopped_steps_agree = true;
  bool exit_noted = false;  // the time its last rank exited has been noted
  // No rank can be silent past its bound before this time: a lower bound on the earliest
  // silence deadline, so an input costs O(1) until then, not a look at every rank (a heartbeat
  // only moves its rank's deadline later). Nothing is expected of a rank before it starts.
  double silence_due = std::numeric_limits<double>::infinity();
  Deadlines deadlines;

  // Generation `number`, launched at `now`: every rank of `plan` running (until a start failure
  // or an exit says otherwise), heard from at `now`.
  static Generation Launched(int64_t number, planner::GridPlan plan, std::vector<Machine> machines,
                             double now);

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
