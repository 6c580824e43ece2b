// RunLoop: the manager's effects layer. It feeds the Controller (controller.h) with what
// happens and carries out what the controller decides:
//
//   events (queue) --> inputs --> Controller::Handle --> actions --> processes, signals,
//                                                                    health checks, records
//
// It owns everything the controller must not touch: the process runners (through
// Transports), the run directory's records (events.jsonl, metrics.jsonl, rank_steps.jsonl, state.json;
// their schema is records/records.h), the
// terminal, the checkpoint directory (which checkpoint a generation resumes from) and the
// machine list file's parsing. Every wait is bounded by the controller's next deadline.
#pragma once

#include <cstdint>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/store.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "contract/worker_messages.h"
#include "common/free_port.h"
#include "common/json.h"
#include "manager/controller.h"
#include "manager/progress.h"
#include "manager/status_report.h"
#include "manager/stragglers.h"
#include "records/records.h"
#include "run/events.h"
#include "run/run_dir.h"
#include "run/run_journal.h"
#include "run/run_observer.h"
#include "run/transports.h"
#include "run/worker_env.h"
#include "run/worker_processes.h"

namespace mitra::run {

struct RunLoopOptions {
  WorkerProgram worker;
  std::string machines_path;      // for messages about list edits
  int gpus_per_node = 1;
  LaunchSettings settings;        // generation, resume step and rendezvous are filled per launch
  double state_interval_s = 1;
  double health_check_timeout_s = 5;
  records::Job job;  // the job as started: state.json's fixed fields (manager pid, program, ...)
  // --preemption-command: run with `sh -c` on every listed machine that is not drained, every
  // preemption_interval_s, through the machine's transport; exit status 0 means "this machine
  // will be taken" and drains it. "": none. A command still running is not started again. It
  // gets the workers' environment plus MITRA_MACHINE, the machine's address as the list has it.
  std::string preemption_command;
  double preemption_interval_s = 5;
  // Workers whose runner can send them lines may park on a morph and be kept by the next
  // generation (docs/manager.md, "Regrouping in place"); --no-regroup turns it off.
  bool regroup = true;
  manager::StragglerOptions stragglers;     // when a rank is a straggler (stragglers.h)
  bool exclude_stragglers = false;  // --exclude-stragglers: drain a straggler's machine
  std::vector<std::string> reported;  // damaged checkpoints the caller has named already
  // Told the machines' states whenever the status lists them again (the journal tells it the
  // records). May be null; must outlive the loop.
  RunObserver* observer = nullptr;

  // The loop's remaining ways out to the world. Each defaults to the real thing; tests and
  // bench/manager_scale replace them to run the loop on a simulated clock, single-threaded
  // (tests/run/fake_transports.h).
  //
  // The next event, waiting at most `wait_s` for one (nullopt: none came). Empty: the queue's
  // PopFor.
  std::function<std::optional<Event>(double wait_s)> next_event;
  // Runs `check`, a health check that may block for seconds and ends by pushing HostChecked
  // onto the queue. Empty: a thread of its own, joined by the loop.
  std::function<void(std::function<void()> check)> run_health_check;
  // A free TCP port on a loopback address, for a local rank 0's rendezvous.
  std::function<Result<int>(const std::string& address)> pick_port = PickFreeTcpPort;
  // The newest checkpoint in a directory that verifies. Empty: checkpoint::FindNewestValid
  // through the loop's FileSystem.
  std::function<Result<checkpoint::Found>(const std::string& dir,
                                          std::vector<std::string>* skipped)>
      find_checkpoint;
};

// Not thread-safe except Status(), which the control socket's thread may call.
class RunLoop {
 public:
  // Every pointer must outlive the loop.
  RunLoop(RunLoopOptions options, manager::ControllerOptions controller_options, Transports* transports,
          FileSystem* fs, Clock* clock, const RunDir* run_dir, RunJournal* journal,
          EventQueue* queue, std::ostream* out, std::ostream* err);
  ~RunLoop();  // joins the health-check threads

  // Runs the job on `machines` until it is done, stopped or failed; returns the exit code of
  // `mitra run` (0 done or stopped, 1 failed, 2 a configuration the workers refuse). Blocks.
  // `unreachable`: addresses of `machines` that failed their check at start.
  int Run(const manager::MachineList& machines, const std::vector<std::string>& unreachable = {});

  // The status `mitra status` shows (docs/mitra-run.md), as of the last event handled (the
  // machines' states may lag by up to 0.25 s): the StatusReport's JSON, built on the caller's
  // thread.
  JsonObject Status() const;

 private:
  void Handle(const manager::ControllerInput& input);
  void Execute(const manager::ControllerAction& action);
  // Carries out a launch: the generation's ranks started as processes or handed to parked
  // workers; then tells the controller GenerationLaunched and each rank's start, in that order.
  void Launch(const manager::LaunchAction& launch);
  // The launch's steps: the loop's books turned to the new generation; what its ranks share
  // (the checkpoint it resumes from, its log directory); one rank started or kept.
  void BeginGeneration(const manager::LaunchAction& launch);
  LaunchSettings GenerationSettings(const manager::LaunchAction& launch);
  // The step a generation resumes from: `held_step` (the step the parked workers it keeps
  // hold) when no checkpoint is newer, else the newest checkpoint that verifies (0: none);
  // damaged ones are named once.
  int64_t ResumeStep(std::optional<int64_t> held_step);
  // Starts `placement`'s rank (or hands it to its parked worker): RankStarted, with its pid in
  // `launched`, or RankStartFailed (also when `port`, the rendezvous port's lookup, failed).
  manager::ControllerInput StartRank(const manager::LaunchAction& launch,
                                     const RankPlacement& placement, const LaunchSettings& settings,
                                     const mitra::Status& port, manager::GenerationLaunched* launched);
  // The worker environment of `placement`'s rank on `machine`, started through `runner`.
  Environment RankEnvironment(const GridPlan& plan, const RankPlacement& placement,
                              const manager::Machine& machine, const LaunchSettings& settings,
                              const launcher::ProcessRunner& runner) const;
  mitra::Status StartProcess(int64_t generation, int rank, const manager::Machine& machine,
                             launcher::ProcessRunner* runner, Environment environment,
                             LiveRank* live);
  // Hands parked worker `worker` rank `rank`'s placement, `environment`; an error when it cannot
  // be told (then the rank is reported as not started).
  mitra::Status Keep(const manager::ParkedWorker& worker, int64_t generation, int rank,
                     const Environment& environment, LiveRank* live);
  void Release(const manager::ReleaseAction& release);
  // Starts a standby worker; parked from its start (processes_), so it can be kept or let go.
  void StartStandby(const manager::StartStandbyAction& standby);
  // After the job's end: waits a little for released workers to exit (they are told to).
  void AwaitReleased();
  void OnWorkerEvent(WorkerEvent& event);
  // A `@mitra` message of a rank (contract/worker_messages.h), read once and received by kind;
  // a line that is no message is recorded as `bad_message`.
  void OnMessage(int64_t generation, int rank, const std::string& text);
  // Where a message came from: a rank of a generation, and whether that generation runs now.
  struct From {
    int64_t generation = 0;
    int rank = 0;
    bool current = false;
  };
  // What the loop does with each kind (docs/worker-contract.md): reports for the controller
  // (starting, ready, parked, heartbeat, step, stopped, checkpoint, restored), after what the
  // loop records and shows of them (metrics, the progress line, events), and notes it only
  // records and shows (eval, settings, warning, settings_replaced, checkpoint_failed). `more`:
  // the fields the kind does not name, which pass through to the records.
  void Receive(const From& from, const contract::message::Starting& starting, const JsonObject& more);
  void Receive(const From& from, const contract::message::Ready& ready, const JsonObject& more);
  void Receive(const From& from, const contract::message::Parked& parked, const JsonObject& more);
  void Receive(const From& from, const contract::message::Heartbeat& beat, const JsonObject& more);
  void Receive(const From& from, const contract::message::Step& step, const JsonObject& more);
  void Receive(const From& from, const contract::message::Stopped& stopped, const JsonObject& more);
  void Receive(const From& from, const contract::message::Checkpoint& done, const JsonObject& more);
  void Receive(const From& from, const contract::message::Restored& restored, const JsonObject& more);
  void Receive(const From& from, const contract::message::Eval& eval, const JsonObject& more);
  void Receive(const From& from, const contract::message::Settings& settings, const JsonObject& more);
  void Receive(const From& from, const contract::message::Warning& warning, const JsonObject& more);
  void Receive(const From& from, const contract::message::SettingsReplaced& replaced,
               const JsonObject& more);
  void Receive(const From& from, const contract::message::CheckpointFailed& failed,
               const JsonObject& more);
  // Read by `mitra run`'s start (describe: run/describe.h) and `mitra profile` (the profiles:
  // run/profile_job.h), or by people in the rank's log (memory, optimizer state); a kind of a
  // newer worker's is let be.
  void Receive(const From&, const contract::message::Describe&, const JsonObject&) {}
  void Receive(const From&, const contract::message::ProfileMachine&, const JsonObject&) {}
  void Receive(const From&, const contract::message::ProfileComm&, const JsonObject&) {}
  void Receive(const From&, const contract::message::Memory&, const JsonObject&) {}
  void Receive(const From&, const contract::message::OptimizerState&, const JsonObject&) {}
  void Receive(const From&, const contract::message::Unknown&, const JsonObject&) {}
  // events.jsonl's `checkpoint` or `restored` record: the worker's fields (its own pass
  // through), its generation and rank.
  void RecordCheckpointEvent(const From& from, const char* event, JsonObject fields);
  // The controller's report of a rank's message, of `kind` at `step`.
  static manager::RankReport ReportOf(const From& from, manager::RankReport::Kind kind,
                                      int64_t step);
  void OnMachineListEdited(const std::string& contents);
  void OnRecord(const manager::RecordAction& record);
  // A failure record's report on the terminal, with what the failed rank printed; false when
  // the record names no rank of the current generation (then its line is shown as any other).
  bool ReportFailure(const JsonObject& failure);
  void OnFinish(const manager::FinishAction& finish);
  void StartHealthCheck(const manager::Machine& machine);
  // Starts the preemption command on each machine due for it; when the next round is due.
  void CheckPreemption();
  void OnPreemptionChecked(const PreemptionChecked& checked);
  // A heartbeat with step times: recorded, and judged for stragglers.
  void OnStepTimes(const From& from, const contract::message::Heartbeat& beat);
  Result<int> RendezvousPort(const manager::Machine& machine, int64_t generation);
  void WriteState(bool force);
  // Brings the status up to date after an event; `changed`: more than its times changed. The
  // machines' list walks every machine, so it is rebuilt at most every 0.1 s, and the loop's
  // wake-ups (every 0.25 s at least) publish a change that waited.
  void PublishStatus(bool changed);
  void Warn(const mitra::Status& status);

  RunLoopOptions options_;
  manager::Controller controller_;
  Transports* transports_;
  FileSystem* fs_;
  Clock* clock_;
  const RunDir* run_dir_;
  RunJournal* journal_;
  EventQueue* queue_;
  std::ostream* out_;
  std::ostream* err_;

  std::deque<manager::ControllerInput> inputs_;  // produced while carrying out actions
  WorkerProcesses processes_;  // which process is which rank, parked, kept or released
  int64_t first_generation_ = 0;  // the controller's first; the state shows it before a launch
  manager::StepStats stats_;
  std::string settings_;  // the last `settings` text shown
  int64_t max_steps_ = 0;
  double start_s_ = 0;
  double last_state_write_s_ = -1e18;
  bool journal_warned_ = false;
  int exit_code_ = -1;
  std::string final_state_;
  JsonObject last_event_;
  std::set<std::string> reported_;  // damaged checkpoints already named on the terminal
  std::string last_failure_key_;  // the error lines ReportFailure quoted last (Key()), if any
  std::string list_rejected_;     // why the last machine-list edit was refused; "": it was not
  std::set<std::string> settings_replaced_;  // rank 0's `settings_replaced` notes, told once
  // Health checks run on threads of their own (a check may block for seconds); finished ones are
  // joined whenever a new one starts, the rest when the loop ends.
  struct Check {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Check> checks_;
  double next_preemption_s_ = 0;           // the next round of preemption commands
  std::set<std::string> preemption_running_;  // machines whose command has not ended
  std::optional<manager::StragglerDetector> stragglers_;  // of the current generation

  mutable std::mutex status_mu_;
  manager::StatusReport status_;  // guarded by status_mu_
  bool machines_stale_ = false;  // something changed since status_.machines was built
  double machines_built_s_ = -1e18;
};

}  // namespace mitra::run
