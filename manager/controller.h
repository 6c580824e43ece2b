// Controller: the elastic manager's decisions, as a pure state machine.
//
//   Handle(input, now) -> actions
//
// The controller owns the job's state (phase, generation, ranks, machines and their health)
// and nothing else: it never starts a process, sends a signal, reads a file or looks at a
// clock. RunLoop (run_loop.h) feeds it inputs (machine list changes, worker reports and exits,
// health-check results, stop requests, the passing of time) and carries out the actions it
// returns (launch a generation, signal a rank, check a host, record an event, finish).
// docs/manager.md draws the phases and their transitions.
//
// Phases:
//   waiting     fewer usable slots than stages: nothing runs until a machine arrives
//   running     a generation trains
//   morphing    the machines changed: every rank was sent SIGUSR1, checkpoints after the same
//               step and exits; then the next generation starts in the new shape. When every
//               rank said it can park, they get SIGUSR2 instead, checkpoint and park; the next
//               generation keeps the parked workers on machines it uses (regrouping in place,
//               parked_workers.h) and starts processes only for the other ranks
//   recovering  a rank failed, vanished or hung: the others are stopped, the failed machine is
//               health-checked, and the next generation starts from the newest checkpoint
//   stopping    the user asked to stop: like morphing, but nothing is relaunched
//   finished    done, stopped or failed; the Finish action has been returned
//
// A rank that has reported `stopped` has left training; it may go on working (evaluating,
// exporting) for as long as it needs: it is not expected to send heartbeats (but one that can
// park and stopped for a morph is: it beats until it parks or exits), and once every
// rank has stopped at the last step the job is complete and is never relaunched.
//
// controller.cc dispatches the inputs, follows each rank and launches generations;
// controller_morph.cc makes planned changes (list edits, drains, grows, regrouping in place);
// controller_failure.cc handles failures; controller_stop.cc stops and signals ranks;
// controller_deadlines.cc watches the time. Its parts with books of their own: generation.h
// (the running generation), machine_pool.h (the machines and their health), standby.h
// (standby and parked workers), restart_budget.h (which failures are relaunched). narration.h
// words what the controller tells.
//
// Not thread-safe: one loop owns it.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/json.h"
#include "launcher/process_runner.h"
#include "manager/failure_excerpt.h"
#include "manager/finish_action.h"
#include "manager/generation.h"
#include "manager/generation_ending.h"
#include "manager/machine_list.h"
#include "manager/machine_pool.h"
#include "manager/narration.h"
#include "manager/parked_workers.h"
#include "manager/restart_budget.h"
#include "manager/standby.h"
#include "planner/grid.h"
#include "planner/shape_policy.h"

namespace mitra::manager {

using planner::FixedStagesPolicy;
using planner::GridPlan;
using planner::RankPlacement;
using planner::ShapePolicy;
using planner::ShapeRequest;

struct ControllerOptions {
  int stages = 1;            // P, as the user set it (--nstages), for the default policy
  // Which shape the usable machines get; null: FixedStagesPolicy(stages).
  std::shared_ptr<const ShapePolicy> policy;
  int segments = 1;          // the program's segment count
  // What each segment's state weighs (its parameters' and buffers' elements), for keeping the
  // most of it in place at a morph (state_placement.h); empty: every segment alike.
  std::vector<int64_t> segment_weights;
  int64_t global_batch = 0;  // B: the same in every shape
  int chunk_size = 0;        // 0: DefaultChunkSize for each shape
  std::optional<bool> zero;  // ZeRO-1 as `mitra run --zero` fixed it; unset: the planner's
  int64_t max_steps = 0;     // for records only
  std::string program;       // the workers' program, for records only (RunLoop sets it)
  int64_t start_step = 0;    // the step the job continues from (its newest checkpoint)
  // The number of the first generation launched: the run directory's next logs/gen-G, so that
  // a resumed job goes on counting. Every later launch is one more.
  int64_t first_generation = 0;

  double stop_timeout_s = 60;      // SIGUSR1 -> every rank exited; then the ranks are killed
  double kill_grace_s = 3;         // SIGTERM -> SIGKILL
  double abandon_s = 10;           // SIGKILL -> stop waiting for an exit (should not happen)
  double finish_timeout_s = 60;    // one rank finished (exit 0) -> the others must follow
  // Launch -> every rank ready (--start-timeout), or 3 times the slowest start this job has
  // seen when that is longer: until then a rank that says nothing is starting, not hung (a
  // program's imports and data can take minutes on a busy machine or a shared file system).
  double startup_timeout_s = 300;
  // A generation still starting after this long is said so, and again every
  // starting_note_every_s: which ranks it waits for, and for how long it will.
  double starting_note_after_s = 10;
  double starting_note_every_s = 30;
  // A rank that has sent one heartbeat, or is ready, is hung when it sends nothing for this
  // long (--heartbeat-timeout).
  double heartbeat_timeout_s = 5;
  // After a failure, how long the relaunch waits for the failed machines' health checks; a
  // machine still unchecked then is left out (and joins later, through a grow).
  double health_wait_s = 3;
  // A machine whose health check fails is retried after backoff_base_s, doubling with every
  // consecutive failure up to backoff_max_s. Failures older than restart_window_s are forgotten.
  double backoff_base_s = 2;
  double backoff_max_s = 300;
  // More than max_restarts unplanned restarts within restart_window_s fail the job.
  int max_restarts = 5;
  double restart_window_s = 600;
  // After a rank fails, survivors that can park get this long to do so (their collectives fail
  // as the failed rank's connections close) before they are killed; the next generation keeps
  // them and heals the failed rank from them. At least 1.5 times the last step's time: a
  // survivor notices the failure only when it next communicates, which a long micro-batch
  // delays. Not after a lost machine (its peers may not notice for a long time) nor while
  // regrouping (then every rank starts afresh).
  double park_grace_s = 1;
  // Standby workers kept on each machine of the running generation, to take a failed rank's
  // place without a process start (--spares).
  int spares = 0;
  // The speed corrections the run's earlier managers measured (RecordedCorrections): the plans
  // start from them, and the job's own compound with them.
  std::vector<planner::SpeedCorrection> corrections;
};

// ---- Inputs ------------------------------------------------------------------------------

// The job starts; `list` is the machine list read at start.
struct StartInput {
  MachineList list;
  std::vector<std::string> unreachable;  // addresses that failed a check just before the start
};

// The machine list file changed and parsed (a list that does not parse never gets here).
struct MachinesChanged {
  MachineList list;
};

// RunLoop's report on a LaunchAction, before its RankStarted and RankStartFailed: what it
// started, the checkpoint the generation resumes from and where its rendezvous is.
struct GenerationLaunched {
  int64_t generation = 0;
  std::vector<int64_t> pids;  // by rank: its process, or the parked worker's; 0: not started
  std::vector<int> kept;      // the ranks given to parked workers
  int64_t resume_step = 0;    // the newest complete checkpoint's step (0: none)
  std::string rendezvous;     // "host:port"
  double launch_s = 0;        // how long carrying out the launch took
};

// RunLoop's report on a Launch: a rank started (pid on its machine) or could not be started.
struct RankStarted {
  int64_t generation = 0;
  int rank = 0;
  int64_t pid = 0;
};
struct RankStartFailed {
  int64_t generation = 0;
  int rank = 0;
  std::string reason;
};

// A `@mitra` record of a rank (docs/worker-contract.md), reduced to what decides anything.
struct RankReport {
  // kStarting: the program has begun (the Python package says so when imported, before its
  // slow imports): the start-up's progress, not a heartbeat.
  enum class Kind {
    kStarting, kReady, kStep, kHeartbeat, kCheckpoint, kRestored, kStopped, kParked
  };
  int64_t generation = 0;
  int rank = 0;
  Kind kind = Kind::kHeartbeat;
  int64_t step = 0;  // kStep, kCheckpoint, kRestored, kStopped, kParked
  bool can_park = false;  // kReady: the rank parks when a morph asks it to (SIGUSR2)
  // kReady: parked, it holds its stage's whole state (not under ZeRO-1 nor with several chunks
  // per rank: `"hold":false`).
  bool can_hold = true;
  double seconds = 0;     // kRestored: how long loading the state took; kStep: the step's time
  // kHeartbeat: the mean compute of the rank's steps since its last heartbeat; < 0: not said.
  double compute_s = -1;
  // kRestored: where the ranks' state came from (how many ranks kept theirs, took it from a
  // peer, read the checkpoint) and the bytes sent between ranks; absent for a plain restore.
  std::optional<StateSources> sources = {};
  // kParked: the state the worker holds in memory, of segments [first, end) after `step` steps
  // (step -1: none).
  HeldSegments held = {};
  // kStopped: the rank left training because it reached its last step (reason `max_steps`).
  // Once every rank has said so, the job's training is complete and checkpointed: the job is
  // never relaunched after it, whatever the ranks do next.
  bool finished = false;
};

struct RankExited {
  int64_t generation = 0;
  int rank = 0;
  launcher::ExitStatus exit;
  FailureExcerpt output = {};  // what it printed last (and its earlier error lines)
};

// The result of a CheckHost action.
struct HostChecked {
  std::string address;  // Machine::Address()
  bool healthy = false;
  std::string reason;  // why not
};

// SIGINT/SIGTERM to the manager, or `mitra stop`. `source` names it in messages.
struct StopInput {
  std::string source;
  // A signal asked twice kills the workers; a second `mitra stop` only says it is under way.
  bool escalates = true;
};

// Move the job off a listed machine and keep it off until its line in the list changes:
// `mitra drain`, a preemption notice, or a straggler with --exclude-stragglers. `by` names it.
struct DrainMachine {
  std::string address;  // Machine::Address()
  std::string by;
};

// A machine of the running generation found slower than its plan expected (a straggler, when
// --exclude-stragglers does not drain it): its rank computed `ratio` times what its stage peers'
// pace gives for its work. Where plans weigh the machines' speeds (a profile), the next plans
// take it that much slower, and the job re-plans now: a planned morph when the plan changes
// (less of the batch for it, or none of the job); drain stays for the user to ask.
struct SlowMachine {
  std::string address;  // Machine::Address()
  double ratio = 1;
};

// Time passed; deadlines are checked on every input, this one carries nothing else.
struct TimerInput {};

using ControllerInput =
    std::variant<StartInput, MachinesChanged, GenerationLaunched, RankStarted, RankStartFailed,
                 RankReport, RankExited, HostChecked, StopInput, DrainMachine, SlowMachine,
                 TimerInput>;

// ---- Actions -----------------------------------------------------------------------------

// Start generation `generation` in `plan`'s shape: rank r runs on machines[plan.ranks[r].machine].
// The ranks resume from the newest complete checkpoint (RunLoop finds and verifies it, and
// says which in GenerationLaunched); `expected_step`, when set, is the step that checkpoint
// must hold (a planned morph: anything older means a step was lost, which the controller
// tells).
struct LaunchAction {
  int64_t generation = 0;
  GridPlan plan;
  std::vector<Machine> machines;
  std::optional<int64_t> expected_step;
  // The ranks that parked workers take (told their placement, not started); every other rank
  // starts a process.
  std::map<int, ParkedWorker> kept;
  // The step whose state the kept workers hold, between them, for every segment: the
  // generation resumes from it when no newer checkpoint exists (docs/manager.md, "State from
  // peers").
  std::optional<int64_t> held_step;
};

// Lets parked workers exit: nothing needs them.
struct ReleaseAction {
  std::vector<ParkedWorker> workers;
};

// StartStandbyAction (standby.h): start a standby worker ahead of a grow, or as a spare.

struct SignalAction {
  int64_t generation = 0;
  int rank = 0;
  int signal_number = 0;
};

// Connect to the machine and run a trivial command; answer with HostChecked.
struct CheckHostAction {
  Machine machine;
};

// An events.jsonl record; `line`, when not empty, is also shown on the terminal (on stderr
// when `error`). The controller states facts; narration.h words them.
struct RecordAction {
  std::string event;
  JsonObject fields;
  std::string line;
  bool error = false;
};

// FinishAction: manager/finish_action.h.

using ControllerAction = std::variant<LaunchAction, ReleaseAction, StartStandbyAction, SignalAction,
                                      CheckHostAction, RecordAction, FinishAction>;

// ---- The state machine -------------------------------------------------------------------

enum class Phase { kWaiting, kRunning, kMorphing, kRecovering, kStopping, kFinished };
std::string PhaseName(Phase phase);

class Controller {
 public:
  explicit Controller(ControllerOptions options);

  // Feeds one input at time `now` (monotonic seconds) and returns what to do, in order.
  std::vector<ControllerAction> Handle(const ControllerInput& input, double now);

  // The earliest time at which a TimerInput would change something (infinity: none).
  double NextDeadline() const;

  Phase phase() const { return phase_; }
  std::string reason() const { return reason_; }  // why waiting, morphing, recovering
  // The current (or last) generation's number; first_generation - 1 before the first launch.
  int64_t generation() const { return gen_.number; }
  const GridPlan& plan() const { return gen_.plan; }
  int64_t last_step() const { return last_step_; }
  bool finished() const { return phase_ == Phase::kFinished; }
  std::vector<MachineView> Machines() const;
  // Which ranks of the current generation run now, and how many have reported ready.
  std::vector<bool> RunningRanksMask() const;
  int ReadyRanks() const;
  // The machine address of each rank of the current generation ("" before the first launch).
  std::vector<std::string> RankAddresses() const;

 private:
  // Why the current generation is ending, and what comes after.
  using Ending = GenerationEnding::Kind;

  // How long `r` may stay silent before it is hung; none while it is not expected to speak.
  std::optional<double> SilenceBound(const RankState& r) const;
  // Whether silent ranks are looked for now (not while the generation is torn down anyway).
  bool SilenceWatched() const;
  // Brings silence_due_ forward to `r`'s deadline: called when a rank's bound starts or shrinks.
  void WatchSilence(const RankState& r);
  // When the running generation's start-up is over: --start-timeout after the launch, or 3
  // times the slowest start this job has seen when that is longer.
  double StartDeadline() const;
  // The start-up deadline passed: the first rank not ready failed.
  void FailSlowStart();
  // Says which ranks are still starting, and for how long they will be waited for.
  void NoteStarting();
  void OnStart(const StartInput& in);
  void OnMachinesChanged(const MachinesChanged& in);
  void OnLaunched(const GenerationLaunched& in);
  void OnRankStarted(const RankStarted& in);
  void OnRankStartFailed(const RankStartFailed& in);
  void OnReport(const RankReport& in);
  void OnExited(const RankExited& in);
  void OnHostChecked(const HostChecked& in);
  void OnStop(const StopInput& in);
  void OnDrain(const DrainMachine& in);
  void OnSlowMachine(const SlowMachine& in);
  void OnTimers();

  // Plans the next generation on the usable machines and launches it, or waits.
  void TryLaunch();
  // The plan the usable machines allow; nullopt (with `why`) when they allow none.
  std::optional<std::pair<GridPlan, std::vector<Machine>>> DesiredPlan(std::string* why) const;
  // Whether `desired` differs from what runs now (shape, the replicas' shares, or machines).
  bool DiffersFromCurrent(const GridPlan& desired, const std::vector<Machine>& machines) const;
  // Records that on `address`, with `busy` of the job's processes, the running generation's
  // steps take `factor` times what its plan expected: the correction its plan was made with
  // (Generation::planned_with) times `factor`, in place of any since; returns it.
  planner::SpeedCorrection Correct(const std::string& address, int busy, double factor);
  // What the running generation's findings so far say of `address` with `busy` busy: its
  // correction now over the one its plan was made with (1: nothing found).
  double FoundAgainstPlan(const std::string& address, int busy) const;
  void BeginMorph(const std::string& why);
  // The running generation, every rank ready, against the machine list as it is now: morphs
  // when the list changed its shape or machines. Tells `fact` (when not null) with what it does.
  void FollowMachineList(const std::string& why, ListChangedFact* fact);
  // A morph into `desired`: when it needs new processes and every rank can park, they start
  // first as standby workers and the morph waits for them (the warm-up, standby.h); otherwise
  // it begins now.
  void Morph(const std::string& why, const GridPlan& desired, const std::vector<Machine>& machines);
  // A standby worker's report or exit (generation kStandbyGeneration).
  void OnStandbyReport(const RankReport& in);
  // Rank `rank` of the current generation parked.
  void OnParked(int rank, const HeldSegments& held);
  // Whether, if every rank parked now, the parked workers a launch of the shape the machines
  // allow would keep hold every stage: then a morph needs no checkpoint (SIGURG).
  bool KeptWorkersWouldHoldEveryStage();
  // The running ranks as the workers they will be once parked for a morph, each with its
  // stage's segments; none when they would park without their state (or hold chunks).
  std::vector<ParkedWorker> HoldersOnceParked();
  // The parked workers the ranks of `plan` take; the rest are let go, but for spares.
  std::map<int, ParkedWorker> TakeParkedFor(const GridPlan& plan,
                                            const std::vector<Machine>& machines);
  // Whether a rank of the running generation runs on `address`.
  bool RunsOn(const std::string& address) const;
  void OnStandbyGone(int id, const std::string& reason);
  // The warm-up is over (every standby parked, failed, or its time ran out): morph, or not.
  void EndWarmUp();
  void BeginStop(const StopInput& in);
  static std::string KillHint(const StopInput& in);  // " (SIGINT again kills them)" or ""

  // A rank failed (or, without `rank`, the generation as a whole: it did not stop in time).
  // `machine_lost`: the connection to its machine was lost, so the relaunch does not wait for
  // that machine's health check (it joins later, through a grow, if it passes). `exited`: the
  // rank's exit, when that is the failure. Tells it, blames the machine, asks the restart
  // budget, and tears the generation down.
  void Fail(std::optional<int> rank, const std::string& what, bool blame_machine,
            bool machine_lost = false, const RankExited* exited = nullptr);
  // Fail's steps.
  FailureFact TellFailure(std::optional<int> rank, const std::string& what);
  // The blamed machine checked now, or kept out (MachinePool::BlameFailure).
  void CheckBlamed(const std::string& address, const std::string& what,
                   const MachinePool::Blame& blame);
  // A recovery, or the job's end when the restart budget says so.
  void JudgeFailure(const std::string& what, bool machine_lost, const RankExited* exited,
                    bool machine_kept_out);
  // SIGKILL to the survivors, or a moment for them to park first.
  void TearDownAfterFailure(std::optional<int> rank, const std::string& what, bool machine_lost,
                            bool during_regroup);
  // A rank failed after the job's training was complete: nothing is relaunched, the others
  // may finish their own work, and the job ends as failed.
  void FailAfterTraining(std::optional<int> rank, const std::string& what);
  // SIGKILL to every running rank (`why` for the record; "" after a SIGTERM's grace).
  void KillRunning(const std::string& why);
  // How ranks asked to stop after the same step go on: they checkpoint and exit (SIGUSR1),
  // checkpoint and park (SIGUSR2), or park holding their state in memory, with no checkpoint
  // (SIGURG: a morph whose next launch keeps workers that hold every stage).
  enum class StopKind { kExit, kPark, kHold };
  // The signal of `kind` to every running rank (SIGUSR1 unless every rank can park), or
  // SIGTERM when not all are ready (before `ready` a worker may not have its handlers yet).
  void AskRanksToStop(StopKind kind = StopKind::kExit);
  bool EveryRankCanPark() const;
  // Lets every parked worker go, and every standby worker not parked yet (ReleaseAction).
  void ReleaseParked();
  // Starts standby workers until every machine of the running generation has options_.spares
  // of them, parked or starting. Called at the generation's first step, not at its launch: a
  // spare builds a stage while it starts, and would take cores from the workers' own start, or
  // from the first step after a heal.
  void KeepSpares();
  void Terminate(const std::string& why);
  void MaybeEndGeneration();
  // Remembers when the last rank of the generation exited (once per generation).
  void NoteRanksExited();
  // The first step after a morph or recovery, at `step`: the downtime and its split.
  // `first_training`: no generation of this manager had trained before (the start failed).
  void TellTrainingAgain(int64_t step, bool first_training);
  // A step of rank 0's, against the plan's prediction: a disagreement corrects the profile
  // the next plans use (corrections_).
  void CheckProfile(double step_s);
  void Finish(FinishAction::Outcome outcome, const std::string& reason);
  // States a fact: narrated (narration.h) into a RecordAction of this generation.
  void Tell(const Fact& fact);
  void Signal(int rank, int signal_number);
  void SignalRunning(int signal_number);
  // The rank of a report or exit, when it belongs to the current generation; nullptr otherwise.
  RankState* CurrentRank(int64_t generation, int rank);
  // Whether the generation is being killed: exits now are our signals or peers of a failure.
  bool TearingDown() const;

  ControllerOptions options_;
  double now_ = 0;
  std::vector<ControllerAction> actions_;

  Phase phase_ = Phase::kWaiting;
  std::string reason_;
  std::string waiting_reason_;  // the last "waiting" recorded, to record each reason once
  // A change that came while the running generation's workers were still starting (why it
  // morphs): its morph waits until they are all ready, to keep their state.
  std::optional<std::string> morph_when_ready_;
  GenerationEnding ending_;  // how the running generation ends, and the change that ends it
  bool stop_requested_ = false;

  std::shared_ptr<const ShapePolicy> policy_;
  MachinePool pool_;
  Generation gen_;  // the current (or last) generation, with its deadlines
  int64_t last_step_ = 0;
  double last_step_s_ = 0;  // the last step's time, as rank 0 reported it
  double slowest_start_s_ = 0;  // the longest a generation of this job took to be all ready
  // What running generations measured against the profile (ProfileCheck), for every plan.
  std::vector<planner::SpeedCorrection> corrections_;
  // Machines told to be planned without figures of their own (UnmeasuredMachineFact).
  std::set<std::string> told_unmeasured_;
  bool trained_ = false;        // some generation of this manager trained a step
  bool training_done_ = false;  // every rank reported `stopped` at the last step
  RestartBudget budget_;
  StandbyWorkers standby_;  // standby workers starting, parked workers, the warm-up of a grow
};

}  // namespace mitra::manager
