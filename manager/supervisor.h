// Supervisor: launches one generation of workers and sees it through to its end.
//
// It starts every rank through the ProcessRunner, then reacts to Events from its queue:
//   - `@mitra` messages: `ready`, `step` (rank 0: metrics.jsonl, a progress line, state.json),
//     `stopped`;
//   - a worker's exit: a failure (non-zero exit or a signal) stops the others with SIGTERM,
//     then SIGKILL after `kill_grace_s`, and the failing rank's last lines are shown;
//   - SIGINT/SIGTERM to the manager: SIGUSR1 to every worker, which stop together after the
//     same step; a second signal, or `stop_timeout_s` without an end, kills them. Before every
//     worker is ready (and so has its SIGUSR1 handler), a stop terminates them instead.
// Every decision is written to events.jsonl. The supervisor never touches processes, files or
// time except through its seams, so tests drive it with a scripted runner and a manual clock.
//
// A full (state, event, now) -> actions state machine (relaunch, morph) arrives later; this
// class keeps decisions in small handlers so that it can be carved out of them.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "launcher/process_runner.h"
#include "manager/events.h"
#include "manager/grid.h"
#include "manager/progress.h"
#include "manager/run_journal.h"

namespace mitra::manager {

struct SupervisorOptions {
  double kill_grace_s = 3;       // SIGTERM -> SIGKILL
  double stop_timeout_s = 60;    // SIGUSR1 -> give up and kill
  double finish_timeout_s = 60;  // once a rank exits 0, the others must follow within this
  double abandon_s = 10;         // after SIGKILL, stop waiting for exits (should never happen)
  double state_interval_s = 1;   // state.json at most this often while steps stream in
  int64_t max_steps = 0;         // for "step N/M" and the ETA; 0 = unknown
};

// One generation's launch: the plan and a ProcessSpec per rank.
struct Job {
  GridPlan plan;
  int64_t generation = 0;
  std::vector<launcher::ProcessSpec> specs;  // indexed by rank
  JsonObject state_fields;                   // fixed fields for state.json (program, ...)
};

struct SupervisorResult {
  enum class Outcome { kDone, kStopped, kFailed };
  Outcome outcome = Outcome::kFailed;
  int64_t last_step = 0;  // the last step rank 0 reported
  std::string reason;     // kFailed: what went wrong, for the last line
};

// Runs on one thread (the one that calls Run, which must be the thread that created the
// runner's children: see LocalProcessRunner). All pointers must outlive the supervisor.
class Supervisor {
 public:
  Supervisor(Job job, SupervisorOptions options, launcher::ProcessRunner* runner, Clock* clock,
             RunJournal* journal, EventQueue* queue, std::ostream* out, std::ostream* err);

  // Launches the job and returns once every started worker has exited (or, should SIGKILL
  // not end one, after abandon_s). Blocks.
  SupervisorResult Run();

 private:
  enum class Phase { kRunning, kStopping, kTerminating };

  struct Rank {
    launcher::ProcessId id = 0;
    int pid = 0;
    bool running = false;
    bool ready = false;
    bool stopped = false;  // printed a `stopped` record
  };

  void Launch();
  void Dispatch(Event& event);
  void OnMessage(int rank, const std::string& text);
  void OnStep(const JsonObject& record);
  void OnExit(int rank, const launcher::ProcessEvent& event);
  void OnStopRequested(int signal_number);
  void OnTimers(double now);
  void Fail(const std::string& reason);
  void BeginTerminate(const std::string& why);
  void SignalRunning(int signal_number);
  double NextDeadline() const;
  SupervisorResult Finish();

  std::vector<int64_t> RunningPids() const;
  // Journal writes: a failure is reported once and the run goes on (records are not worth
  // killing a training job for).
  void Record(const std::string& event, const JsonObject& fields);
  void Warn(const Status& status);
  void WriteState(bool force);
  std::string PhaseName() const;
  double Elapsed() const { return clock_->MonotonicSeconds() - start_s_; }

  Job job_;
  SupervisorOptions options_;
  launcher::ProcessRunner* runner_;
  Clock* clock_;
  RunJournal* journal_;
  EventQueue* queue_;
  std::ostream* out_;
  std::ostream* err_;

  std::vector<Rank> ranks_;
  int live_ = 0;
  int ready_ = 0;
  Phase phase_ = Phase::kRunning;
  bool user_stop_ = false;
  std::optional<std::string> failure_;  // set once: the first failure is the one reported
  double start_s_ = 0;
  std::optional<double> stop_deadline_s_;
  std::optional<double> finish_deadline_s_;
  std::optional<double> kill_deadline_s_;
  std::optional<double> abandon_deadline_s_;
  double last_state_write_s_ = -1e18;
  bool journal_warned_ = false;
  std::string final_state_;  // "done", "stopped" or "failed" once Run is over
  StepStats stats_;
  int64_t last_step_ = 0;
};

}  // namespace mitra::manager
