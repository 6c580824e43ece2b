// The run directory's records (docs/mitra-run.md): one struct per kind that programs read back,
// with its JSON fields named once (common/json_fields.h).
//
// `mitra status`, the Prometheus metrics, `mitra report` and `mitra plan --validate` read what
// the manager wrote. Each kind they rely on is a struct here whose static Fields() names every
// JSON field once; ToJson() writes a struct and FromJson() reads one, both through Fields(). So
// a field renamed in Fields() is renamed for writer and readers at once, a member renamed fails
// to compile where it is used, and records_test holds each kind's field names against the
// tables of docs/mitra-run.md. Records of other kinds (the manager's diagnostics: `kill`,
// `signal`, `host_failed`, ...) are narrated as plain JSON and read by people only.
//
// Reading is lenient, as it must be for files a crash may have cut or an older mitra wrote: a
// missing field or one of another type keeps the member's default (an optional stays empty).
//
// Plain values: copyable, no synchronization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/json_fields.h"

namespace mitra::records {

// The files of a run directory that hold records.
inline constexpr const char* kEventsFile = "events.jsonl";
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kRankStepsFile = "rank_steps.jsonl";
inline constexpr const char* kStateFile = "state.json";

// Each generation's folder of logs and step traces, relative to the run directory:
//   logs/gen-G/rank-R.log          everything rank R printed
//   logs/gen-G/rank-R.trace.json   the chrome trace of one step (local workers only)
std::string GenerationLogDir(int64_t generation);           // "logs/gen-3"
std::string StepTraceName(int rank);                        // "rank-1.trace.json"
std::string StepTraceFile(int64_t generation, int rank);    // "logs/gen-3/rank-1.trace.json"

// A step trace's format, and which of its spans are compute: contract/step_trace.h.

// ---- events.jsonl: {"time":T,"event":NAME, ...the kind's fields} ----------------------------

// The job as `mitra run` started it: in its `start` record and in state.json.
struct Job {
  int64_t manager_pid = 0;
  std::string run_dir, machines_file, program;
  std::vector<std::string> program_args;
  double started_at = 0;  // Unix seconds

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("manager_pid", r.manager_pid), f("run_dir", r.run_dir), f("machines_file", r.machines_file);
    f("program", r.program), f("program_args", r.program_args), f("started_at", r.started_at);
  }
};

// Before the first launch of a `mitra run`.
struct Start {
  static constexpr const char* kEvent = "start";
  Job job;
  int64_t slots = 0, idle_slots = 0, segments = 0;
  double tokens_per_sample = 0;
  double describe_s = 0;
  int64_t threads = 0;
  double timeout_s = 0;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    Job::Fields(r.job, f);
    f("slots", r.slots), f("idle_slots", r.idle_slots), f("segments", r.segments);
    f("tokens_per_sample", r.tokens_per_sample), f("describe_s", r.describe_s);
    f("threads", r.threads), f("timeout_s", r.timeout_s);
  }
};

// The shape a generation runs in: in `launch` records and in state.json.
struct Shape {
  int64_t generation = 0;
  int64_t stages = 0, replicas = 0, world_size = 0, global_batch = 0, chunk_size = 0;
  std::string stage_to_rank_map;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("stages", r.stages), f("replicas", r.replicas);
    f("world_size", r.world_size), f("global_batch", r.global_batch);
    f("chunk_size", r.chunk_size), f("stage_to_rank_map", r.stage_to_rank_map);
  }
};

// A generation started.
struct Launch {
  static constexpr const char* kEvent = "launch";
  Shape shape;
  // A planned shape: what the planner chose; `schedule` is its name, "+recompute" appended when
  // the shape recomputes activations (e.g. "1f1b+recompute").
  std::optional<std::string> schedule, partition;
  // Each replica's micro-batches, where the planner made them uneven (machines that differ);
  // absent: even.
  std::optional<std::vector<int64_t>> shares;
  std::optional<double> predicted_step_s;
  std::optional<int64_t> predicted_memory_bytes;
  std::vector<int64_t> pids;  // by rank; 0: not started
  std::string program;
  double launch_s = 0;
  std::vector<std::string> machines;  // by rank
  std::vector<int64_t> kept;          // ranks taken by parked workers
  int64_t resume_step = 0;
  std::string rdzv;  // host:port
  // The step whose state the kept workers hold for every segment (docs/manager.md, "State from
  // peers"); absent when they hold none whole.
  std::optional<int64_t> held_step;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    Shape::Fields(r.shape, f);
    f("schedule", r.schedule), f("partition", r.partition), f("shares", r.shares);
    f("predicted_step_s", r.predicted_step_s);
    f("predicted_memory_bytes", r.predicted_memory_bytes);
    f("pids", r.pids), f("program", r.program), f("launch_s", r.launch_s);
    f("machines", r.machines), f("kept", r.kept), f("resume_step", r.resume_step);
    f("rdzv", r.rdzv), f("held_step", r.held_step);
  }
};

// Rank 0's effective settings (the worker's `settings` record, docs/worker-contract.md), at the
// first launch and when they change. The worker may add fields of its own; they pass through.
struct Settings {
  static constexpr const char* kEvent = "settings";
  int64_t generation = 0;
  std::string text;  // what the terminal shows
  std::optional<std::string> schedule, partition;
  std::optional<bool> recompute;
  std::optional<bool> zero;  // the optimizer state sharded over the replicas (ZeRO-1)

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("text", r.text), f("schedule", r.schedule);
    f("partition", r.partition), f("recompute", r.recompute), f("zero", r.zero);
  }
};

// Every rank reported `ready`.
struct Ready {
  static constexpr const char* kEvent = "ready";
  int64_t generation = 0;
  double rendezvous_s = 0;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("rendezvous_s", r.rendezvous_s);
  }
};

// A planned morph began: every rank checkpoints and stops after the same step.
struct Morph {
  static constexpr const char* kEvent = "morph";
  int64_t generation = 0;
  std::string reason;
  std::string from;  // the shape it leaves
  int64_t step = 0;
  // Where the ranks keep their state for the next generation: "memory" (they park holding it)
  // or "checkpoint" (they write one first).
  std::string state;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("reason", r.reason), f("from", r.from), f("step", r.step);
    f("state", r.state);
  }
};

// A failure; the job recovers (`failure`) or, after its last step, ends failed
// (`failure_after_training`, which names no pid or machine).
struct Failure {
  static constexpr const char* kEvent = "failure";
  static constexpr const char* kAfterTrainingEvent = "failure_after_training";
  int64_t generation = 0;
  std::string reason;
  int64_t step = 0;
  std::optional<int64_t> rank, pid;
  std::optional<std::string> machine;
  std::optional<bool> during_regroup;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("reason", r.reason), f("step", r.step), f("rank", r.rank);
    f("pid", r.pid), f("machine", r.machine), f("during_regroup", r.during_regroup);
  }
};

// The first step after a morph or a recovery, and the downtime it ended, split: stop (the
// change seen -> every rank exited or parked), relaunch (-> launched), ready (-> every rank
// ready), load (rank 0's restore) and first step (the rest).
struct FirstStep {
  static constexpr const char* kEvent = "first_step";
  int64_t generation = 0;
  std::string kind;  // "morph" or "recovery"
  int64_t step = 0;
  std::string shape;
  int64_t kept = 0, started = 0;  // ranks taken by parked workers, ranks that started a process
  double downtime_s = 0, stop_s = 0, relaunch_s = 0, ready_s = 0, load_s = 0, first_step_s = 0;
  // Where the ranks' state came from (ranks that kept their own, took it from peers, read the
  // checkpoint) and the bytes sent between ranks; absent when every rank read the checkpoint.
  std::optional<int64_t> state_kept, state_peer, state_checkpoint, peer_bytes;
  std::optional<double> peer_bytes_per_s;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("kind", r.kind), f("step", r.step), f("shape", r.shape);
    f("kept", r.kept), f("started", r.started), f("downtime_s", r.downtime_s);
    f("stop_s", r.stop_s), f("relaunch_s", r.relaunch_s), f("ready_s", r.ready_s);
    f("load_s", r.load_s), f("first_step_s", r.first_step_s);
    f("state_kept", r.state_kept), f("state_peer", r.state_peer);
    f("state_checkpoint", r.state_checkpoint), f("peer_bytes", r.peer_bytes);
    f("peer_bytes_per_s", r.peer_bytes_per_s);
  }
};

// Rank 0 completed a checkpoint, or (`restored`) loaded one: the worker's record plus
// generation and rank; other fields of the worker's pass through.
struct Checkpoint {
  static constexpr const char* kEvent = "checkpoint";
  static constexpr const char* kRestoredEvent = "restored";
  int64_t generation = 0;
  int64_t rank = 0;
  int64_t step = 0;
  std::optional<double> blocked_s;  // checkpoint: training stopped for this long
  std::optional<double> total_s;    // checkpoint: until the checkpoint was complete

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("rank", r.rank), f("step", r.step);
    f("blocked_s", r.blocked_s), f("total_s", r.total_s);
  }
};

// A rank computed markedly slower than its stage's peers (docs/mitra-run.md, stragglers).
struct Straggler {
  static constexpr const char* kEvent = "straggler";
  int64_t generation = 0;
  int64_t rank = 0;
  std::string machine;
  int64_t stage = 0;
  double compute_s = 0, peer_median_s = 0, ratio = 0;
  int64_t steps = 0;
  bool drain = false;  // the straggler rule drains its machine (--exclude-stragglers)

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("generation", r.generation), f("rank", r.rank), f("machine", r.machine);
    f("stage", r.stage), f("compute_s", r.compute_s), f("peer_median_s", r.peer_median_s);
    f("ratio", r.ratio), f("steps", r.steps), f("drain", r.drain);
  }
};

// The end of a `mitra run`: its event is the end state.
struct End {
  static constexpr const char* kDone = "done";
  static constexpr const char* kStopped = "stopped";
  static constexpr const char* kFailed = "failed";
  static bool IsEnd(std::string_view event) {
    return event == kDone || event == kStopped || event == kFailed;
  }
  int64_t step = 0;
  double wall_s = 0;
  std::optional<double> loss, mean_tokens_per_s, mean_samples_per_s;
  std::optional<std::string> reason;  // failed

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("wall_s", r.wall_s), f("loss", r.loss);
    f("mean_tokens_per_s", r.mean_tokens_per_s), f("mean_samples_per_s", r.mean_samples_per_s);
    f("reason", r.reason);
  }
};

// ---- metrics.jsonl ---------------------------------------------------------------------------

// A training step: rank 0's `step` record without "event" (the worker may add fields of its
// own, which pass through), the shape filled in where the worker left it out, and "time".
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  int64_t samples = 0;
  double samples_per_s = 0;
  std::optional<int64_t> tokens;
  std::optional<double> tokens_per_s;
  double step_time_s = 0;
  int64_t stages = 0, replicas = 0, generation = 0;
  double time = 0;

  // A metrics.jsonl record is a step's when it has a loss (an evaluation's has eval_loss).
  static bool IsStep(const JsonObject& record) { return record.Has("loss"); }

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("loss", r.loss), f("samples", r.samples);
    f("samples_per_s", r.samples_per_s), f("tokens", r.tokens), f("tokens_per_s", r.tokens_per_s);
    f("step_time_s", r.step_time_s), f("stages", r.stages), f("replicas", r.replicas);
    f("generation", r.generation), f("time", r.time);
  }
};

// An evaluation: rank 0's `eval` record with its fields prefixed `eval_` (eval_loss,
// eval_<metric>...), so that no reader of losses takes it for a step.
struct EvalMetrics {
  static constexpr const char* kPrefix = "eval_";
  int64_t step = 0;
  int64_t generation = 0;
  double eval_loss = 0;
  std::optional<double> eval_accuracy;
  double time = 0;

  static bool IsEval(const JsonObject& record) { return record.Has("eval_loss"); }

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("generation", r.generation), f("eval_loss", r.eval_loss);
    f("eval_accuracy", r.eval_accuracy), f("time", r.time);
  }
};

// ---- rank_steps.jsonl: one record per rank and heartbeat -------------------------------------

struct RankSteps {
  double time = 0;
  int64_t generation = 0;
  int64_t rank = 0, stage = 0;
  int64_t step = 0;   // its last
  int64_t steps = 0;  // since its previous record
  double compute_s = 0, wait_s = 0;  // mean seconds per step

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("time", r.time), f("generation", r.generation), f("rank", r.rank), f("stage", r.stage);
    f("step", r.step), f("steps", r.steps), f("compute_s", r.compute_s), f("wait_s", r.wait_s);
  }
};

// ---- state.json --------------------------------------------------------------------------------

// What a reader of state.json relies on; the manager writes more (docs/mitra-run.md): the
// workers to clean up, which it writes and reads itself.
struct State {
  std::string state;  // running, morphing, recovering, waiting, stopping; done, stopped, failed
  std::string reason;
  Job job;
  Shape shape;
  int64_t step = 0, max_steps = 0;
  std::optional<double> loss, samples_per_s, tokens_per_s;
  int64_t ready_workers = 0, running_workers = 0;
  std::vector<int64_t> pids;  // of the running workers
  double elapsed_s = 0;
  double updated_at = 0;  // Unix seconds

  static bool IsEnd(std::string_view state) { return End::IsEnd(state); }

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("state", r.state), f("reason", r.reason);
    Job::Fields(r.job, f);
    Shape::Fields(r.shape, f);
    f("step", r.step), f("max_steps", r.max_steps), f("loss", r.loss);
    f("samples_per_s", r.samples_per_s), f("tokens_per_s", r.tokens_per_s);
    f("ready_workers", r.ready_workers), f("running_workers", r.running_workers);
    f("pids", r.pids), f("elapsed_s", r.elapsed_s), f("updated_at", r.updated_at);
  }
};

// ---- Writing and reading: common/json_fields.h ------------------------------------------------

using fields::FieldNames;
using fields::FromJson;
using fields::SetFields;
using fields::ToJson;

}  // namespace mitra::records
